"""The evaluate stage's quality pictures: a confusion matrix and a reliability diagram a variant."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.plots import new_figure, save_png

COLOURS = ("tab:grey", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def confusion_chart(matrices: dict[str, np.ndarray], class_names: Sequence[str], path: str | os.PathLike[str]) -> Path:
    """One 2x2 panel a variant: counts, and the share of each true label's rows."""
    names = list(matrices)
    columns = min(3, len(names))
    rows = -(-len(names) // columns)
    fig = new_figure(3.6 * columns + 0.4, 3.3 * rows + 0.4)
    fig.suptitle("confusion matrices on the test split (rows: true label)", fontsize=12)
    axes = np.atleast_1d(fig.subplots(rows, columns, squeeze=False)).ravel()
    for ax, name in zip(axes, names, strict=False):
        matrix = matrices[name]
        share = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
        ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
        for (i, j), count in np.ndenumerate(matrix):
            ax.text(j, i, f"{count}\n{100 * share[i, j]:.1f} %", ha="center", va="center", fontsize=10,
                    color="white" if share[i, j] > 0.6 else "black")
        ax.set_xticks(range(len(class_names)), class_names)
        ax.set_yticks(range(len(class_names)), class_names)
        ax.set_xlabel("predicted label")
        ax.set_ylabel("true label")
        ax.set_title(name, fontsize=10)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return save_png(fig, path)


def calibration_chart(tables: dict[str, list[dict[str, float]]], ece: dict[str, float],
                      path: str | os.PathLike[str]) -> Path:
    """Reliability diagram (accuracy against confidence, one line a variant, the diagonal is perfect
    calibration) above a histogram of how many test rows fall in each confidence bin."""
    fig = new_figure(8, 7.5)
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 1.3], sharex=True)
    low = min((r["low"] for rows in tables.values() for r in rows), default=0.5)  # 1/K: the least a top label holds
    top.plot([low, 1.0], [low, 1.0], color="black", linestyle="--", linewidth=1, label="perfectly calibrated")
    bin_width = next((r["high"] - r["low"] for rows in tables.values() for r in rows), 0.05)
    width = bin_width / (len(tables) + 1)  # the variants' bars side by side inside one bin
    for i, ((name, rows), colour) in enumerate(zip(tables.items(), COLOURS, strict=False)):
        conf = [r["confidence"] for r in rows]
        top.plot(conf, [r["accuracy"] for r in rows], marker="o", color=colour, label=f"{name} (ECE {ece[name]:.3f})")
        centres = [(r["low"] + r["high"]) / 2 + (i - len(tables) / 2) * width for r in rows]
        bottom.bar(centres, [r["rows"] for r in rows], width=width, color=colour)
    top.set_ylabel("accuracy of the rows in the bin")
    top.set_title("reliability diagram on the test split")
    top.set_xlim(low - 0.01, 1.01)
    top.set_ylim(0.0, 1.02)
    top.grid(True, alpha=0.3)
    top.legend(fontsize=9, loc="upper left")
    bottom.set_xlabel("confidence (probability of the predicted label)")
    bottom.set_ylabel("rows")
    bottom.grid(True, alpha=0.3)
    return save_png(fig, path)
