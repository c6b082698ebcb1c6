"""Models into predictions, batched, without padding waste (texts into ids: ``minibert.tokenizer.encode``).

``predict_logits`` runs a classifier over length-sorted batches (so each batch
is padded only to its own longest text) and returns logits in the original order. ``precision``
``bf16`` or ``auto`` runs the forward passes under bf16 autocast (``minibert.precision``): 1.5 to 2.2x
faster for the mini teacher on a CPU with AVX512-BF16, logits within about 1e-2 of fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from minibert.batching import batched_logits
from minibert.precision import autocast, resolve_precision
from minibert.windows import aggregate_windows, document_windows


def predict_logits(
    model: nn.Module | Callable[[Tensor, Tensor], Tensor],
    sequences: Sequence[Sequence[int]],
    batch_size: int,
    pad_id: int = 0,
    precision: str = "fp32",
) -> np.ndarray:
    """(N, L) float32 logits for N encoded sequences, in input order; ``precision``: fp32 | bf16 | auto."""

    device = next(model.parameters()).device if isinstance(model, nn.Module) else torch.device("cpu")
    resolved = resolve_precision(precision, device)

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return model(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)).float().cpu().numpy()

    with torch.inference_mode(), autocast(resolved, device):
        return batched_logits(run, sequences, batch_size, pad_id)


def predict_documents(
    model: nn.Module | Callable[[Tensor, Tensor], Tensor],
    documents: Sequence[Sequence[int]],
    max_length: int,
    stride: int,
    aggregate: str,
    batch_size: int,
    cls_id: int,
    sep_id: int,
    precision: str = "fp32",
) -> np.ndarray:
    """(N, L) logits for N documents of any length: sliding windows, batched, then aggregated."""
    windows, counts = document_windows(documents, max_length, stride, cls_id, sep_id)
    return predict_windows(model, windows, counts, aggregate, batch_size, precision)


def predict_windows(
    model: nn.Module | Callable[[Tensor, Tensor], Tensor],
    windows: Sequence[Sequence[int]],
    counts: Sequence[int],
    aggregate: str,
    batch_size: int,
    precision: str = "fp32",
) -> np.ndarray:
    """(N, L) logits for N documents already cut into ``windows`` (``document_windows``: ``counts``
    windows each), for callers that score the same documents again and again."""
    return aggregate_windows(predict_logits(model, windows, batch_size, precision=precision), counts, aggregate)
