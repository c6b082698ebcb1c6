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
    from matplotlib.axes import Axes
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


# Where a label may sit around its point, most preferred first: (x, y) direction of the text from
# the point; each is tried at growing distances (points), the farther ones drawn with a leader line.
_DIRECTIONS = ((1, 1), (1, -1), (1, 0), (-1, 0), (0, 1), (0, -1), (-1, 1), (-1, -1))
_DISTANCES = (5.0, 12.0, 22.0, 36.0, 54.0)
_HA = {1: "left", 0: "center", -1: "right"}
_VA = {1: "bottom", 0: "center", -1: "top"}


def _gap(box: tuple[float, float, float, float], x: float, y: float) -> float:
    """Display distance from (x, y) to the rectangle ``box`` (x0, y0, x1, y1); 0 inside it."""
    return math.hypot(max(box[0] - x, 0.0, x - box[2]), max(box[1] - y, 0.0, y - box[3]))


def _place_labels(ax: Axes, groups: dict[tuple[float, float], list[str]], table: pd.DataFrame, column: str) -> None:
    """Annotate each group at its own point. The text goes to the first spot (nearest first) that stays
    in the axes, covers no point or earlier label, and lies nearer one of its own points than any other
    point (where none does, the spot with the fewest faults); set apart from its point, a leader line
    joins them. Needs the figure's layout settled."""
    fig = ax.get_figure()
    pixels = fig.dpi / 72  # display pixels a point
    frame = ax.get_window_extent()
    points = ax.transData.transform(list(zip(table[column].astype(float), 100 * table["accuracy"].astype(float))))
    names = [str(v) for v in table["variant"]]
    radius = math.sqrt(40) / 2 * pixels + 1  # the scatter marker (s=40 points squared), and a pixel to spare
    taken: list[tuple[float, float, float, float]] = []
    for (x, y), group in groups.items():
        px, py = ax.transData.transform((x, y))
        text = ", ".join(group)
        probe = ax.annotate(text, (x, y), fontsize=9)
        size = probe.get_window_extent()  # the text's extent in display pixels, wherever it goes
        probe.remove()
        own = [tuple(p) for p, n in zip(points, names) if n in group]
        other = [tuple(p) for p, n in zip(points, names) if n not in group]
        best: tuple[tuple[int, ...], float, int, int, tuple[float, float, float, float]] | None = None
        for distance in _DISTANCES:
            for dx, dy in _DIRECTIONS:
                tx, ty = px + dx * distance * pixels, py + dy * distance * pixels  # the text's anchor
                x0 = tx - size.width * (1 - dx) / 2
                y0 = ty - size.height * (1 - dy) / 2
                box = (x0, y0, x0 + size.width, y0 + size.height)
                pad = (box[0] - 2, box[1] - 2, box[2] + 2, box[3] + 2)
                faults = (
                    sum(pad[0] < t[2] and t[0] < pad[2] and pad[1] < t[3] and t[1] < pad[3] for t in taken),
                    sum(_gap(box, *p) < radius for p in points),
                    int(min(_gap(box, *p) for p in own) >= min((_gap(box, *p) for p in other), default=math.inf)),
                    int(not (frame.x0 <= box[0] and box[2] <= frame.x1 and frame.y0 <= box[1] and box[3] <= frame.y1)),
                )
                if best is None or faults < best[0]:
                    best = (faults, distance, dx, dy, box)
            if best is not None and not any(best[0]):
                break
        assert best is not None
        _, distance, dx, dy, box = best
        taken.append(box)
        far = distance > _DISTANCES[0]
        ann = ax.annotate(text, (x, y), xytext=(dx * distance, dy * distance), textcoords="offset points",
                          ha=_HA[dx], va=_VA[dy], fontsize=9,
                          arrowprops=dict(arrowstyle="-", color="0.45", lw=0.7, shrinkA=0, shrinkB=radius / pixels,
                                          relpos=((1 - dx) / 2, (1 - dy) / 2)) if far else None)
        ann.set_in_layout(False)  # the layout was settled without labels: their spots stay as measured


def tradeoff_figure(table: pd.DataFrame) -> Figure:
    """Accuracy against p50 latency and against size, one labelled point a variant (or a group of
    variants that would overprint); each label sits by its own point, clear of the others.

    ``table`` needs columns variant, accuracy, p50_ms, size_mb. Log-scaled x axes: the
    variants span an order of magnitude or more in both.
    """
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig = new_figure(11, 4.2)
    axes = fig.subplots(1, 2)
    columns = ("p50_ms", "size_mb")
    for ax, column, label in ((axes[0], columns[0], "p50 latency, batch 1 (ms, log scale)"),
                              (axes[1], columns[1], "size on disk (MB, log scale)")):
        ax.scatter(table[column], 100 * table["accuracy"], s=40, color="tab:blue")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())  # 0.5, 1, 2 rather than 5x10^-1
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.15, y=0.12)
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy on the test split (%)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("accuracy vs latency")
    axes[1].set_title("accuracy vs size")
    fig.draw_without_rendering()  # settles the layout, so labels are placed in final display coordinates
    for ax, column in zip(axes, columns):
        _place_labels(ax, _label_groups(table, column), table, column)
    return fig


def tradeoff_chart(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """``tradeoff_figure`` of ``table`` written as a PNG to ``path``."""
    return save_png(tradeoff_figure(table), path)
