"""What the registered model ships: the pyfunc's code, the library it serves through, the pinned packages of its
serving environment, and its model_config (``pipeline/serving_model.py``). The register stage logs it; the serving
benchmark saves the same model."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from minibert.contract import Contract

SERVING_PACKAGES = ("onnxruntime", "openvino", "tokenizers", "numpy", "pandas")
SERVING_CODE = Path(__file__).resolve().parent / "serving_model.py"
SERVING_LIBRARY = Path(__file__).resolve().parents[1] / "minibert"  # shipped beside it: it serves through minibert.runtime


def pip_requirements() -> list[str]:
    """Exact pins of what the serving model imports, from this environment (no inference); a package this
    environment lacks is left out (openvino: the served model then runs on ONNX Runtime)."""
    pins = []
    for name in SERVING_PACKAGES:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            if name != "openvino":
                raise
    return pins


def serving_config(contract: Contract, threads: int) -> dict:
    """The registered model's ``model_config`` (``pipeline.serving_model``): the engine's threads, the inference path
    (auto: the serving host's fastest verified one, ``minibert.runtime``), and the deployed graph's windows as its
    file records them (the served model reads them from the graph too)."""
    windows = contract.windows
    return {"max_length": windows.max_length, "stride": windows.stride, "aggregate": windows.aggregate, "threads": threads,
            "runtime": "auto", "precision": "auto"}
