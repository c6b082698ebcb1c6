"""The cached teacher logits: written atomically, read back only while they match the split in use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.io import DataError
from pipeline.stages.teacher_logits import load_logits, save_logits


def test_round_trip_and_stale_or_broken_files_are_refused(tmp_path: Path) -> None:
    labels = np.array([0, 1, 1, 0])
    logits = np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32)
    path = tmp_path / "cache" / "train.npz"
    save_logits(path, logits, labels)
    assert [p.name for p in path.parent.iterdir()] == ["train.npz"], "no temporary left behind"
    np.testing.assert_array_equal(load_logits(path, labels), logits)
    with pytest.raises(DataError, match=r"4 rows do not match the 5 training rows.*dvc repro teacher_logits"):
        load_logits(path, np.array([0, 1, 1, 0, 1]))
    with pytest.raises(DataError, match="do not match"):
        load_logits(path, np.array([1, 1, 1, 0]))  # same count, other rows
    path.write_bytes(b"not numpy")
    with pytest.raises(DataError, match="not a teacher-logits file"):
        load_logits(path, labels)
    with pytest.raises(FileNotFoundError, match="dvc repro teacher_logits"):
        load_logits(tmp_path / "absent.npz", labels)
