"""The prepared tables (stage ``prepare``) and their contract, ``dataset.json``: the class names in label order,
and the intermediate task's name when there is one. Not the dataset's own name: the same data under another
name prepares byte for byte the same, so nothing downstream of ``prepare`` can depend on the name.

Splits: ``train``, ``val``, ``test`` (the test split of record) and, with an intermediate task,
``intermediate_train`` / ``intermediate_val`` / ``intermediate_test``. Kept apart from ``pipeline.task``
(which encodes texts for the model and needs torch) so that the stages that only read the splits (report,
the promotion gate) start without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.io import DataError, read_json, read_table

CONTRACT = "dataset.json"
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Prepared:
    """What ``dataset.json`` says of the prepared tables."""

    labels: tuple[str, ...]  # class names, in label order
    intermediate: str | None  # the intermediate task's description, or None

    @property
    def num_labels(self) -> int:
        return len(self.labels)


def prepared(data_dir: Path) -> Prepared:
    path = Path(data_dir) / CONTRACT
    raw = read_json(path)
    try:
        return Prepared(tuple(raw["labels"]), raw["intermediate"])
    except (KeyError, TypeError) as err:
        raise DataError(f"{path}: not a prepared-data contract (missing {err}); rerun `dvc repro prepare`") from err


def split_path(data_dir: Path, split: str, intermediate: bool = False) -> Path:
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")
    return Path(data_dir) / f"{'intermediate_' if intermediate else ''}{split}.parquet"


def load_split(data_dir: Path, split: str, intermediate: bool = False) -> pd.DataFrame:
    return read_table(split_path(data_dir, split, intermediate), ["text", "label"])
