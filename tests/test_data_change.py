"""What a retraining run logs about its data: rows added / removed per class, relabelled rows, the new-vocabulary
rate and the label shift between two prepared snapshots."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pipeline import data_change
from pipeline.data_change import Snapshot, compare
from pipeline.io import write_json
from pipeline.splits import CONTRACT


def snap(rows: list[tuple[str, int]], classes: tuple[str, ...] = ("neg", "pos"), test: tuple[str, ...] = ("t",)) -> Snapshot:
    return Snapshot(classes, pd.DataFrame(rows, columns=["text", "label"]), frozenset(test))


def test_a_drop_is_counted_per_class_with_its_new_words_and_the_label_shift() -> None:
    old = snap([("good film", 1), ("bad film", 0), ("dull plot", 0), ("fine cast", 1)])
    new = snap([("good film", 1), ("bad film", 1), ("fine cast", 1), ("great score", 1), ("good plot twist", 1)])
    change = compare(old, new)
    assert (change["rows_before"], change["rows_after"]) == (4, 5)
    assert (change["rows_added"], change["rows_removed"], change["rows_relabelled"]) == (2, 1, 1)
    assert change["added_per_class"] == {"neg": 0, "pos": 2} and change["removed_per_class"] == {"neg": 1, "pos": 0}
    # added words: great, score, good, plot, twist; good and plot were in the old training texts
    assert change["new_vocabulary_rate"] == pytest.approx(3 / 5)
    assert change["class_share_before"] == {"neg": 0.5, "pos": 0.5} and change["class_share_after"] == {"neg": 0.0, "pos": 1.0}
    assert change["label_shift"] == pytest.approx(0.5)
    assert not change["test_changed"] and not change["classes_changed"]
    line = data_change.summary(change)
    assert "+2 / -1 training rows (pos +2)" in line and "1 relabelled" in line and "label shift 0.500" in line
    metrics = data_change.metrics(change)
    assert metrics["data_rows_added"] == 2.0 and metrics["data_added_pos"] == 2.0 and metrics["data_added_neg"] == 0.0


def test_classes_compare_by_name_and_an_unchanged_table_says_so() -> None:
    old = snap([("a b", 0), ("c d", 1)], classes=("x", "y"))
    reordered = snap([("a b", 1), ("c d", 0)], classes=("y", "x"))
    change = compare(old, reordered)
    assert change["rows_relabelled"] == 0 and change["label_shift"] == 0.0 and change["classes_changed"]
    same = compare(old, old)
    assert data_change.summary(same) == "data: unchanged (2 training rows)" and same["new_vocabulary_rate"] == 0.0
    grown = compare(old, snap([("a b", 0), ("c d", 1), ("e f", 2)], classes=("x", "y", "billing & refunds")))
    assert grown["added_per_class"]["billing & refunds"] == 1
    assert "data_added_billing _ refunds" in data_change.metrics(grown), "a class name made fit for an MLflow metric"
    assert compare(old, snap([("a b", 0), ("c d", 1)], classes=("x", "y"), test=("u",)))["test_changed"]
    assert data_change.summary(None).startswith("data: no earlier prepared data")


def test_a_snapshot_reads_the_prepared_folder_or_is_none(tmp_path: Path) -> None:
    assert data_change.snapshot(tmp_path / "absent") is None
    folder = tmp_path / "prepared"
    folder.mkdir()
    write_json({"labels": ["neg", "pos"], "intermediate": None}, folder / CONTRACT)
    pd.DataFrame({"text": ["good film", "bad film"], "label": [1, 0]}).to_parquet(folder / "train.parquet")
    assert data_change.snapshot(folder) is None, "no test split: not a finished prepare"
    pd.DataFrame({"text": ["ok film"], "label": [1]}).to_parquet(folder / "test.parquet")
    shot = data_change.snapshot(folder)
    assert shot.classes == ("neg", "pos") and shot.train["text"].tolist() == ["good film", "bad film"]
    assert shot.test_texts == frozenset({"ok film"})
