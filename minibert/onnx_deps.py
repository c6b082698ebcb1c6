"""``onnx`` and ``onnxruntime``, imported where a function needs them (``import minibert`` stays torch-only),
with an ImportError that says what to install. Export, quantization and the ORT fusion pass all call these."""

from __future__ import annotations

from typing import Any


def import_onnx() -> Any:
    """The ``onnx`` module, or an ImportError that says what to install."""
    try:
        import onnx
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("ONNX export needs onnx: pip install 'onnx>=1.23'") from err
    return onnx


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an ImportError that says what to install."""
    try:
        import onnxruntime
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("ONNX Runtime inference needs onnxruntime: pip install 'onnxruntime>=1.32'") from err
    return onnxruntime
