"""Atomic file output for the library (readers see the old file or the complete new one), and the
error for artifacts that cannot be used (damaged, truncated, or not matching each other)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class ArtifactError(ValueError):
    """A model, checkpoint or tokenizer file is unreadable or does not match another one; the
    message names the file(s) and what to do."""


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success move it onto ``path``, on error delete it.

    The temporary lives in the same folder so that ``os.replace`` is a rename on one file system:
    readers see either the old file or the complete new one. Missing parent folders are created.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # a private folder, not mkstemp: the file is created by its writer, with the umask's permissions
    folder = Path(tempfile.mkdtemp(prefix=f".{target.stem}.", suffix=".tmp", dir=target.parent))
    tmp = folder / target.name
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
