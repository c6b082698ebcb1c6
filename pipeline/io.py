"""File output that never leaves half-written files: write to a temp file, then rename.

Also the table reader/writer the stages share (parquet via pandas), which checks columns and
names the file and the fix when something is off.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd


class DataError(ValueError):
    """Input data is malformed; the message names the file, row or column and the fix."""


class StageError(RuntimeError):
    """A stage's result failed a check (e.g. ONNX parity); nothing was written."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success rename it into place, on error delete it.

    Works for files and for directories (the caller creates the directory at the temp path).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)) / path.name
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_json(data: Any, path: str | os.PathLike[str]) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return Path(path)


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run the stage that writes it first (dvc repro)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err}); delete it and rerun the stage that writes it") from err


def write_table(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return Path(path)


def read_table(path: str | os.PathLike[str], columns: Sequence[str]) -> pd.DataFrame:
    """Read a parquet table and check it has ``columns``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run the stage that writes it first (dvc repro)")
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid / ArrowIOError derive from these
        raise DataError(f"{path}: not a readable parquet table ({err}); delete it and rerun the stage that "
                        "writes it (dvc repro)") from err
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; found {list(df.columns)}; rerun `dvc repro prepare`")
    return df


def text_lines(path: Path, compressed: bool = False) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file (gzipped if ``compressed``), without the newline;
    DataError naming the line on bytes that are not UTF-8, and on a damaged gzip stream."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; pull the raw data first (dvc pull, or make pipeline)")
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as f:
            for line_no, raw in enumerate(f, start=1):
                try:
                    yield line_no, raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as err:
                    raise DataError(f"{path}, line {line_no}: byte {raw[err.start]:#04x} at column {err.start + 1} is not "
                                    "UTF-8; re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from err
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: not a complete gzip file ({err}); pull it again (dvc pull --force)") from err
