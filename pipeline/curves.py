"""Training curves: what a stage's training loops logged, as a table (DVC plots CSV) and a PNG.

The loops log through a ``RecordingTracker`` wrapped round the stage's MLflow tracker, so MLflow
gets every point as it happens and the stage writes the same points to
``plots/curves/<stage>.csv`` (one row a logged step) and ``.png`` at the end. A stage with two
phases (fine-tuning after an intermediate task, whose metrics carry the ``transfer_`` prefix)
gets one continuous step axis: the later phase's steps follow the earlier one's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pipeline.io import atomic_path
from pipeline.plots import new_figure, save_png

TRANSFER_PREFIX = "transfer_"
PHASE_COLOURS = ("tab:orange", "tab:blue", "tab:green")


def curve_table(history: Sequence[tuple[int | None, dict[str, float]]], phase: str,
                prefixes: Sequence[tuple[str, str]] = ((TRANSFER_PREFIX, "transfer"),)) -> pd.DataFrame:
    """Rows of (step, phase, phase_step, metric columns...) from a tracker's history.

    A record whose names all start with one of ``prefixes`` ((prefix, phase name)) belongs to
    that phase, its names stripped; the rest belong to ``phase``. Records of one phase and step
    (the train log and an evaluation) merge into one row. Steps restart at 1 in each phase;
    ``step`` runs on across phases in the order they first appear. Records without a step are
    not curve points and are left out.
    """
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for step, metrics in history:
        if step is None or not metrics:
            continue
        name, strip = phase, ""
        for prefix, prefixed_phase in prefixes:
            if all(k.startswith(prefix) for k in metrics):
                name, strip = prefixed_phase, prefix
                break
        rows.setdefault((name, int(step)), {}).update({k[len(strip):]: float(v) for k, v in metrics.items()})
    order: list[str] = []
    for name, _ in rows:
        if name not in order:
            order.append(name)
    offsets, offset = {}, 0
    for name in order:
        offsets[name] = offset
        offset += max(s for n, s in rows if n == name)
    table = pd.DataFrame([{"step": offsets[name] + s, "phase": name, "phase_step": s, **values}
                          for (name, s), values in rows.items()])
    if table.empty:
        return pd.DataFrame(columns=["step", "phase", "phase_step"])
    return table.sort_values("step", kind="stable").reset_index(drop=True)


def _validation_column(table: pd.DataFrame) -> str | None:
    """The held-out metric to plot: accuracy for a classifier, masked-token accuracy for MLM."""
    for column in ("eval_accuracy", "eval_mlm_accuracy"):
        if column in table and table[column].notna().any():
            return column
    return None


def curves_chart(table: pd.DataFrame, path: str | os.PathLike[str], title: str) -> Path:
    """Three panels against the step: training loss, learning rate, validation accuracy (%),
    one colour a phase, a dashed line where a phase begins."""
    fig = new_figure(13, 4)
    fig.suptitle(title, fontsize=12)
    axes = fig.subplots(1, 3)
    panels = [("train_loss", "training loss", 1.0), ("lr", "learning rate", 1.0),
              (_validation_column(table), "validation accuracy (%)", 100.0)]
    for ax, (column, label, scale) in zip(axes, panels, strict=True):
        for colour, (name, part) in zip(PHASE_COLOURS, table.groupby("phase", sort=False), strict=False):
            if column is None or column not in part:
                continue
            points = part[["step", column]].dropna()
            ax.plot(points["step"], scale * points[column], color=colour, label=name,
                    marker="o" if column.startswith("eval_") else None, markersize=4)
        for _, part in list(table.groupby("phase", sort=False))[1:]:  # where each later phase begins
            ax.axvline(part["step"].min() - part["phase_step"].min() + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(label)
        ax.set_title(label if column is not None else f"{label}: not measured")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=9)
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    return save_png(fig, path)


def write_curves(history: Sequence[tuple[int | None, dict[str, float]]], csv_path: str | os.PathLike[str],
                 phase: str, title: str) -> tuple[Path, Path]:
    """``csv_path`` (the DVC plot) and the PNG beside it (same name, ``.png``); returns both."""
    table = curve_table(history, phase)
    csv_path = Path(csv_path)
    with atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False)
    return csv_path, curves_chart(table, csv_path.with_suffix(".png"), title)
