"""``onnx``, imported where a function needs it (``import minibert`` stays torch-only), with an ImportError that
says what to install. Export, quantization and the ORT fusion pass call it; ``onnxruntime`` is
``minibert.engines.import_onnxruntime``."""

from __future__ import annotations

from typing import Any


def import_onnx() -> Any:
    """The ``onnx`` module, or an ImportError that says what to install."""
    try:
        import onnx
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("ONNX export needs onnx: pip install 'onnx>=1.23'") from err
    return onnx

