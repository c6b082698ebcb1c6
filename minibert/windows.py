"""Reading texts longer than the model's window: sliding windows in, one row of logits out.

Pure numpy and lists (no torch), so the ONNX runtime (``minibert.runtime``) and the torch
predictors (``minibert.inference``) share one rule. Windows of a document are laid out one
after another, documents in order, so ``aggregate_windows`` combines them with one segmented
reduction instead of a loop over documents.

Shape legend: N documents, W windows over all documents, L labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def sliding_windows(ids: Sequence[int], max_length: int, stride: int, cls_id: int, sep_id: int) -> list[list[int]]:
    """[CLS] window [SEP] sequences covering a long document's ids (no specials).

    Windows hold ``max_length - 2`` tokens and start every ``stride`` tokens (stride <= window:
    consecutive windows overlap by window - stride); the last window ends at the document's end.
    """
    body = max_length - 2
    if not 0 < stride <= body:
        raise ValueError(f"stride must be in 1..{body} (max_length - 2), got {stride}")
    if len(ids) <= body:
        return [[cls_id, *ids, sep_id]]
    starts = list(range(0, len(ids) - body, stride)) + [len(ids) - body]
    return [[cls_id, *ids[s : s + body], sep_id] for s in starts]


def chunk_document(ids: Sequence[int], max_length: int, cls_id: int, sep_id: int) -> list[list[int]]:
    """Split a document's ids (no specials) into [CLS] piece [SEP] sequences of <= max_length."""
    body = max_length - 2
    return [[cls_id, *ids[i : i + body], sep_id] for i in range(0, len(ids), body)] if ids else []


def document_windows(
    documents: Sequence[Sequence[int]], max_length: int, stride: int, cls_id: int, sep_id: int
) -> tuple[list[list[int]], np.ndarray]:
    """Every document's windows, in document order, and the window count of each document (N,)."""
    windows: list[list[int]] = []
    counts = np.empty(len(documents), dtype=np.int64)
    for doc, ids in enumerate(documents):
        pieces = sliding_windows(ids, max_length, stride, cls_id, sep_id)
        windows.extend(pieces)
        counts[doc] = len(pieces)
    return windows, counts


def _mean(logits: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.add.reduceat(logits, starts, axis=0) / counts[:, None].astype(logits.dtype)


def _max(logits: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.maximum.reduceat(logits, starts, axis=0)


def _first(logits: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return logits[starts]


# How a document's window logits become one row: (W, L) logits, (N,) start rows, (N,) counts -> (N, L).
AGGREGATIONS = {"mean": _mean, "max": _max, "first": _first}


def aggregate_windows(logits: np.ndarray, counts: np.ndarray, how: str) -> np.ndarray:
    """(W, L) window logits laid out document by document -> (N, L) by ``how`` (mean, max, first)."""
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregate must be one of {list(AGGREGATIONS)}, got {how!r}")
    if len(counts) == 0:
        return np.empty((0, logits.shape[1] if logits.ndim == 2 else 0), dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return AGGREGATIONS[how](logits, starts, counts)
