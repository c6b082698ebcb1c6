"""Attention pictures: one head's map, every head of a sentence as a grid, and per-head statistics.

Maps have the sentence's tokens on both axes (query tokens down, key tokens across), as in
``bertviz``'s head view flattened to a heat map; statistics are one heat map a measure, layers
down and heads across, each cell printed with its value.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.plots import new_figure, save_png

PICTURED = 2  # the first test texts, drawn head by head (plots/attention/text_<i>.png, and the report)
STATISTIC_TITLES = {
    "next_token": "to the next token",
    "previous_token": "to the previous token",
    "self": "to itself",
    "cls": "to [CLS]",
    "sep": "to [SEP]",
    "informative": "to the task's informative words",
}


def _token_axes(ax, tokens: Sequence[str], fontsize: float) -> None:  # noqa: ANN001 - a matplotlib Axes
    ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(tokens)), tokens, fontsize=fontsize)
    ax.tick_params(length=0)


def attention_head_chart(weights: np.ndarray, tokens: Sequence[str], path: str | os.PathLike[str], title: str) -> Path:
    """One head's (T, T) map, large, with a colour bar; cells print their weight when T <= 16."""
    size = max(5.0, 0.42 * len(tokens) + 2.5)
    fig = new_figure(size + 1.2, size)
    ax = fig.subplots()
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0)
    _token_axes(ax, tokens, fontsize=10)
    ax.set_xlabel("key token (attended to)")
    ax.set_ylabel("query token (attending)")
    ax.set_title(title)
    if len(tokens) <= 16:
        for (i, j), value in np.ndenumerate(weights):
            if value >= 0.05:
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if value > 0.6 else "white")
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return save_png(fig, path)


def attention_grid_chart(maps: np.ndarray, tokens: Sequence[str], path: str | os.PathLike[str], title: str) -> Path:
    """Every head of every layer for one sentence: ``maps`` (L, H, T, T), layers down, heads across."""
    layers, heads = maps.shape[:2]
    panel = max(2.6, 0.17 * len(tokens) + 1.2)
    fig = new_figure(panel * heads + 0.8, panel * layers + 0.6)
    fig.suptitle(title, fontsize=12)
    axes = np.atleast_2d(fig.subplots(layers, heads, squeeze=False))
    fontsize = 8 if len(tokens) <= 16 else 6
    image = None
    for (layer, head), ax in np.ndenumerate(axes):
        image = ax.imshow(maps[layer, head], cmap="viridis", vmin=0.0, vmax=1.0)
        _token_axes(ax, tokens, fontsize)
        ax.set_title(f"layer {layer}, head {head}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight (query row -> key column)")
    return save_png(fig, path)


def head_statistics_chart(table: pd.DataFrame, path: str | os.PathLike[str], title: str) -> Path:
    """``table``: one row a (layer, head) with a column a statistic (``STATISTIC_TITLES`` keys)."""
    names = [n for n in STATISTIC_TITLES if n in table]
    layers, heads = int(table["layer"].max()) + 1, int(table["head"].max()) + 1
    columns = min(3, len(names))
    rows = -(-len(names) // columns)
    fig = new_figure(columns * (0.9 * heads + 2.2), rows * (0.75 * layers + 1.4))
    fig.suptitle(title, fontsize=12)
    axes = np.atleast_1d(fig.subplots(rows, columns, squeeze=False)).ravel()
    for ax, name in zip(axes, names, strict=False):
        grid = np.zeros((layers, heads))
        grid[table["layer"].to_numpy(), table["head"].to_numpy()] = table[name].to_numpy()
        ax.imshow(grid, cmap="magma", vmin=0.0, vmax=max(1e-6, float(grid.max())))
        for (i, j), value in np.ndenumerate(grid):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9,
                    color="black" if value > 0.6 * grid.max() else "white")
        ax.set_xticks(range(heads), [str(h) for h in range(heads)])
        ax.set_yticks(range(layers), [str(layer) for layer in range(layers)])
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"mean attention {STATISTIC_TITLES[name]}", fontsize=10)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return save_png(fig, path)
