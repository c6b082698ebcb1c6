"""Charts the stages write as PNG (rendered offline by matplotlib, without pyplot)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from pipeline.io import atomic_path


def tradeoff_chart(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Accuracy against p50 latency and against size, one labelled point a variant.

    ``table`` needs columns variant, accuracy, p50_ms, size_mb. Log-scaled x axes: the
    variants span an order of magnitude or more in both.
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend, no window, no state kept

    fig = Figure(figsize=(11, 4.2), constrained_layout=True)
    axes = fig.subplots(1, 2)
    for ax, column, label in ((axes[0], "p50_ms", "p50 latency, batch 1 (ms, log scale)"),
                              (axes[1], "size_mb", "size on disk (MB, log scale)")):
        ax.scatter(table[column], 100 * table["accuracy"], s=40, color="tab:blue")
        for _, row in table.iterrows():
            ax.annotate(row["variant"], (row[column], 100 * row["accuracy"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=9)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy on the test split (%)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("accuracy vs latency")
    axes[1].set_title("accuracy vs size")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    return Path(path)
