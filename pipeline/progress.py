"""Progress bars for the long loops (tqdm): shown on a terminal, quiet in logs, pipes and CI.

``MINIBERT_PROGRESS=1`` forces them on, ``0`` off; otherwise they show when stderr is a terminal
and the ``CI`` variable is unset (GitHub Actions, GitLab and most CI services set it).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def enabled() -> bool:
    forced = os.environ.get("MINIBERT_PROGRESS", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stderr.isatty() and not os.environ.get("CI")


@contextlib.contextmanager
def progress_bar(total: int, desc: str) -> Iterator[Callable[[int, float], None]]:
    """Yields ``update(step, loss)`` for ``minibert.trainer.fit``'s progress hook."""
    bar = tqdm(total=total, desc=desc, unit="step", disable=not enabled(), mininterval=2.0)

    def update(step: int, loss: float) -> None:
        bar.update(step - bar.n)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    try:
        yield update
    finally:
        bar.close()


def progress(items: Iterable[T], desc: str, unit: str = "it", total: int | None = None) -> Iterator[T]:
    """``items`` with a bar (a plain loop when bars are off)."""
    yield from tqdm(items, desc=desc, unit=unit, total=total, disable=not enabled(), mininterval=2.0)
