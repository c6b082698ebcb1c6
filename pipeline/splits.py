"""Which prepared tables a task reads: its train / val / test-of-record splits.

Kept apart from ``pipeline.task`` (which encodes texts for the model and needs torch) so that the
stages that only read the splits (report, the promotion gate) start without torch.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.io import read_table
from pipeline.params import TaskParams

# name -> prepared table names of (train, val, test of record)
TASK_SPLITS: dict[str, dict[str, str]] = {
    "sst2": {"train": "sst2_train", "val": "sst2_val", "test": "sst2_dev"},  # GLUE dev is SST-2's test of record
    "imdb": {"train": "imdb_train", "val": "imdb_val", "test": "imdb_test"},
}


def split_path(data_dir: Path, task: TaskParams, split: str) -> Path:
    return data_dir / f"{TASK_SPLITS[task.name][split]}.parquet"


def load_split(data_dir: Path, task: TaskParams, split: str) -> pd.DataFrame:
    return read_table(split_path(data_dir, task, split), ["text", "label"])
