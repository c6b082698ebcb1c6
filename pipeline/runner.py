"""Entry wrapper for stage and CLI mains: user errors become one clear line and exit code 2."""

from __future__ import annotations

import sys
from collections.abc import Callable

from minibert.files import ArtifactError
from minibert.validation import ConfigError
from pipeline.io import DataError, StageError

USER_ERRORS = (ArtifactError, ConfigError, DataError, FileNotFoundError, StageError)


def run_main(main: Callable[[], object], exit: bool = True) -> int:
    """Run ``main``; a user error or failed check prints ``error: <message>`` and gives code 2
    (no traceback). Exits the process with the code unless ``exit`` is False (then returns it)."""
    try:
        result = main()
        code = result if isinstance(result, int) else 0
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        code = 2
    if exit:
        raise SystemExit(code)
    return code
