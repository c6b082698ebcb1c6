"""Progress bars for the training loops (tqdm), quiet when stderr is not a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from tqdm import tqdm


@contextlib.contextmanager
def progress_bar(total: int, desc: str) -> Iterator[Callable[[int, float], None]]:
    """Yields ``update(step, loss)`` for ``minibert.trainer.fit``'s progress hook."""
    bar = tqdm(total=total, desc=desc, unit="step", disable=not sys.stderr.isatty(), mininterval=2.0)

    def update(step: int, loss: float) -> None:
        bar.update(step - bar.n)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    try:
        yield update
    finally:
        bar.close()
