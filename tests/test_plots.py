"""The evaluate stage's chart: a PNG with one label a point, overprinting points sharing one label."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.plots import _label_groups, tradeoff_chart

TABLE = pd.DataFrame({
    "variant": ["teacher", "student", "student_onnx", "student_onnx_int8"],
    "accuracy": [0.8188, 0.8131, 0.8131, 0.8119],
    "p50_ms": [4.96, 0.96, 0.52, 0.31],
    "size_mb": [21.6, 5.49, 5.52, 1.61],
})


def test_points_that_would_overprint_share_a_label() -> None:
    by_size = _label_groups(TABLE, "size_mb")
    assert sorted(by_size.values()) == [["student", "student_onnx"], ["student_onnx_int8"], ["teacher"]]
    assert len(_label_groups(TABLE, "p50_ms")) == 4  # apart on the latency axis


def test_chart_is_a_png_written_atomically(tmp_path: Path) -> None:
    path = tradeoff_chart(TABLE, tmp_path / "plots" / "tradeoff.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, "a real 1320x504 chart, not an empty canvas"
    assert [p.name for p in path.parent.iterdir()] == ["tradeoff.png"]
