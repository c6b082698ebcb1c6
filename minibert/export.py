"""ONNX export of a sequence classifier, an ONNX Runtime session, and a torch-vs-ORT parity check.

Reference: the PyTorch tutorial "Export a PyTorch model to ONNX" and ONNX Runtime's
"Python API" (``InferenceSession``, ``SessionOptions``). Departures:

1. The exporter is the TorchScript one (``torch.onnx.export(..., dynamo=False)``), not torch
   2.13's default dynamo exporter: 0.4 s instead of 5.7 s for the tiny preset (8-14 s for larger
   models, STACK_NOTES); it writes one self-contained file (the dynamo exporter writes
   ``.onnx.data`` beside it unless told not to), and its graph runs at any batch size and sequence length for our hand-written attention
   (checked against torch in tests/test_export.py). Its deprecation warnings are silenced by
   message, nothing else. If a later torch removes it, switch ``_torchscript_export`` to
   ``dynamo=True, external_data=False, dynamic_shapes=...``; the tests say whether it still holds.
2. Every file is written atomically (``atomic_output``): a temporary file in the target's folder,
   checked, then ``os.replace``; a failed export leaves neither a temporary nor a half file.
   Weights above protobuf's 2 GiB limit (external data) are out of scope; BERT-base is 0.44 GB.
3. ``onnx`` and ``onnxruntime`` are imported inside the functions that need them, so
   ``import minibert`` stays torch-only.

Shape legend: B batch, T sequence length, L labels.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from minibert.engines import OUTPUT_NAME, onnx_logits
from minibert.files import atomic_output
from minibert.model import SequenceClassifier
from minibert.onnx_deps import import_onnx
from minibert.ort_fusion import fused_attention as fuse_attention

if TYPE_CHECKING:  # for annotations only; never imported at run time here
    import onnxruntime

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
DYNAMIC_AXES: dict[str, dict[int, str]] = {
    "input_ids": {0: "batch", 1: "sequence"},
    "attention_mask": {0: "batch", 1: "sequence"},
    "token_type_ids": {0: "batch", 1: "sequence"},
    OUTPUT_NAME: {0: "batch"},
}
# The TorchScript exporter's deprecation notices, matched by the start of their message.
_TORCHSCRIPT_WARNINGS = (
    r"You are using the legacy TorchScript-based ONNX export",
    r"The feature will be removed",
)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run a block with ``model`` in eval mode (no dropout), then restore its previous mode."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def example_inputs(model: nn.Module, with_token_types: bool, batch: int = 2, seq_len: int = 8) -> tuple[Tensor, ...]:
    """Dummy (B, T) int64 inputs for tracing, on the model's device; one padded position so the
    traced graph takes the masking path. Values are irrelevant: only shapes and dtypes are traced."""
    device = next(model.parameters()).device
    ids = torch.ones(batch, seq_len, dtype=torch.long, device=device)
    mask = torch.ones_like(ids)
    mask[-1, -1] = 0
    return (ids, mask, torch.zeros_like(ids)) if with_token_types else (ids, mask)


def _torchscript_export(model: nn.Module, args: tuple[Tensor, ...], path: Path, opset: int) -> None:
    """torch.onnx.export through the TorchScript exporter, its deprecation notices silenced."""
    names = list(INPUT_NAMES[: len(args)])
    with warnings.catch_warnings():
        for message in _TORCHSCRIPT_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        torch.onnx.export(
            model,
            args,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=[OUTPUT_NAME],
            dynamic_axes={k: DYNAMIC_AXES[k] for k in (*names, OUTPUT_NAME)},
            do_constant_folding=True,
        )


def export_onnx(
    model: SequenceClassifier,
    path: str | os.PathLike[str],
    opset: int = 18,
    with_token_types: bool = False,
    fused_attention: bool = False,
) -> Path:
    """Export ``model`` to one self-contained ONNX file at ``path`` and return that path.

    Graph inputs: ``input_ids`` and ``attention_mask`` (B, T) int64, plus ``token_type_ids``
    (B, T) int64 when ``with_token_types``; output ``logits`` (B, L) float32. B and T are
    symbolic (``batch``, ``sequence``). Exported in eval mode; the model's mode is restored.
    ``fused_attention``: each attention block becomes one ONNX Runtime ``Attention`` node
    (``minibert.ort_fusion``; the file then runs in ONNX Runtime only). The file passes
    ``onnx.checker.check_model`` before it replaces anything at ``path``.
    """
    onnx = import_onnx()
    args = example_inputs(model, with_token_types)
    with atomic_output(path) as tmp, eval_mode(model), torch.no_grad():
        with fuse_attention(model) if fused_attention else nullcontext():
            _torchscript_export(model, args, tmp, opset)
        onnx.checker.check_model(str(tmp))
    return Path(path)


def session_callable(session: onnxruntime.InferenceSession) -> Callable[[Tensor, Tensor], Tensor]:
    """A session behind the torch classifier's (input_ids, attention_mask) -> logits signature."""
    return lambda ids, mask: torch.from_numpy(onnx_logits(session, ids, mask))


def parity(
    model: SequenceClassifier, session: onnxruntime.InferenceSession, batches: Iterable[tuple[Tensor, Tensor]]
) -> dict[str, float]:
    """Compare torch (eval mode) and ONNX Runtime logits over (input_ids, attention_mask) batches.

    Returns ``max_abs_diff`` (largest |torch - ORT| over every logit), ``argmax_agreement``
    (fraction of examples, 0..1, whose predicted label matches) and ``examples`` (count).
    """
    worst, agree, total = 0.0, 0, 0
    device = next(model.parameters()).device
    with eval_mode(model), torch.no_grad():
        for input_ids, attention_mask in batches:
            expected = model(input_ids.to(device), attention_mask.to(device)).float().cpu().numpy()  # (B, L)
            got = onnx_logits(session, input_ids, attention_mask)  # (B, L)
            worst = max(worst, float(np.abs(expected - got).max()))
            agree += int((expected.argmax(-1) == got.argmax(-1)).sum())
            total += expected.shape[0]
    if total == 0:
        raise ValueError("batches is empty; pass at least one (input_ids, attention_mask) pair")
    return {"max_abs_diff": worst, "argmax_agreement": agree / total, "examples": float(total)}
