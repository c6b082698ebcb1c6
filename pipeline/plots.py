"""Charts the stages write as PNG, rendered offline by matplotlib (no pyplot: no global backend,
no window, no state kept between charts), and the shared way they are saved."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.io import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 120


def new_figure(width: float, height: float) -> Figure:
    """A pyplot-free figure (inches); ``save_png`` writes it."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), constrained_layout=True)


def save_png(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as PNG atomically (a temp file renamed into place)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    return Path(path)


def _label_groups(table: pd.DataFrame, column: str) -> dict[tuple[float, float], list[str]]:
    """Variants whose points would overprint (within 5 % on the log x axis, 0.05 accuracy points)
    share one label: {(x, accuracy %): [names]}."""
    groups: dict[tuple[float, float], list[str]] = {}
    for _, row in table.sort_values(column).iterrows():
        x, y = float(row[column]), 100 * float(row["accuracy"])
        near = next((k for k in groups if abs(math.log(x / k[0])) < 0.05 and abs(y - k[1]) < 0.05), None)
        groups.setdefault(near or (x, y), []).append(str(row["variant"]))
    return groups


def tradeoff_chart(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Accuracy against p50 latency and against size, one labelled point a variant.

    ``table`` needs columns variant, accuracy, p50_ms, size_mb. Log-scaled x axes: the
    variants span an order of magnitude or more in both.
    """
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig = new_figure(11, 4.2)
    axes = fig.subplots(1, 2)
    for ax, column, label in ((axes[0], "p50_ms", "p50 latency, batch 1 (ms, log scale)"),
                              (axes[1], "size_mb", "size on disk (MB, log scale)")):
        ax.scatter(table[column], 100 * table["accuracy"], s=40, color="tab:blue")
        for i, ((x, y), names) in enumerate(_label_groups(table, column).items()):
            ax.annotate(", ".join(names), (x, y), textcoords="offset points", fontsize=9,
                        xytext=(5, 5 if i % 2 == 0 else -13))  # alternate above / below: neighbours overlap less
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())  # 0.5, 1, 2 rather than 5x10^-1
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.15, y=0.12)
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy on the test split (%)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("accuracy vs latency")
    axes[1].set_title("accuracy vs size")
    return save_png(fig, path)
