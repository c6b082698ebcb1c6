"""Turning texts into model inputs and models into predictions, batched, without padding waste.

``encode`` tokenizes with the ``tokenizers`` library (Rust, batched) and truncates to
``max_length``; ``predict_logits`` runs a classifier over length-sorted batches (so each batch
is padded only to its own longest text) and returns logits in the original order. ``precision``
``bf16`` or ``auto`` runs the forward passes under bf16 autocast (``minibert.precision``): 1.5 to 2.2x
faster for the mini teacher on a CPU with AVX512-BF16, logits within about 1e-2 of fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from minibert.batching import batched_logits
from minibert.precision import autocast, resolve_precision
from minibert.tokenizer import CLS, SEP, encodable
from minibert.windows import aggregate_windows, document_windows


def head_tail(ids: Sequence[int], body: int) -> list[int]:
    """The first quarter and last three quarters of ``body`` tokens (Sun et al. 2019: reviews
    state their verdict at the end)."""
    if len(ids) <= body:
        return list(ids)
    head = body // 4
    return [*ids[:head], *ids[len(ids) - (body - head):]]


TRUNCATIONS = ("head", "head_tail")


def encode(tokenizer: Tokenizer, texts: Sequence[str], max_length: int, truncation: str = "head") -> list[list[int]]:
    """Token ids with [CLS] ... [SEP], cut to ``max_length`` (the [SEP] is kept).

    ``truncation``: "head" keeps the first tokens; "head_tail" keeps the first quarter and
    the last three quarters of the window.
    """
    if max_length < 3:
        raise ValueError(f"max_length must be >= 3 to hold [CLS] x [SEP], got {max_length}")
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
    tokenizer.no_padding()
    if truncation == "head_tail":
        tokenizer.no_truncation()
        cls_id, sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
        docs = tokenizer.encode_batch([encodable(t) for t in texts], add_special_tokens=False)
        return [[cls_id, *head_tail(e.ids, max_length - 2), sep_id] for e in docs]
    tokenizer.enable_truncation(max_length=max_length)
    try:
        return [e.ids for e in tokenizer.encode_batch([encodable(t) for t in texts])]
    finally:
        tokenizer.no_truncation()


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


def chunk_document(ids: Sequence[int], max_length: int, cls_id: int, sep_id: int) -> list[list[int]]:
    """Split a document's ids (no specials) into [CLS] piece [SEP] sequences of <= max_length."""
    body = max_length - 2
    return [[cls_id, *ids[i : i + body], sep_id] for i in range(0, len(ids), body)] if ids else []


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
