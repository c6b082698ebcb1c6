"""The soft targets distillation reads: cached (N, L) logit files, and the mix of several models' targets.

``teacher_logits`` writes the fine-tuned teacher's logits on the training rows; ``baseline_oof``
writes the TF-IDF model's out-of-fold log-probabilities on the training texts; ``cnn`` the
word-CNN's logits on the training rows. Each file carries
the labels of the rows it was computed on, so a file left stale by a data or task change is
refused instead of silently misaligned. Torch-free: the TF-IDF stage never loads torch for it.
"""

from __future__ import annotations

import itertools
import zipfile
from pathlib import Path

import numpy as np

from pipeline.io import DataError, atomic_path

PROB_FLOOR = 1e-6  # log(0) guard for probabilities that round to 0
UNLABELLED = -1  # the label stored for rows of the transfer set, which have none


def save_logits(path: Path, logits: np.ndarray, labels: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:  # a handle: np.savez would append .npz to a bare name
            np.savez(handle, logits=logits.astype(np.float32), labels=labels.astype(np.int64))


def load_logits(path: Path, labels: np.ndarray, stage: str = "teacher_logits", columns: int | None = None) -> np.ndarray:
    """(N, L) logits from ``path`` (written by ``stage``), checked against the ``labels`` of the rows in use
    and, when given, the number of label ``columns``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run `dvc repro {stage}` first")
    try:
        with np.load(path) as data:
            logits, stored = data["logits"], data["labels"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}: not a {stage} file ({err}); delete it and rerun `dvc repro {stage}`") from err
    if logits.ndim != 2 or len(logits) != len(labels) or not np.array_equal(stored, labels):
        raise DataError(f"{path}: {len(logits)} rows do not match the {len(labels)} training rows in use "
                        f"(stale after a data or task change); rerun `dvc repro {stage}`")
    if columns is not None and logits.shape[1] != columns:
        raise DataError(f"{path}: {logits.shape[1]} label columns, the teacher has {columns}; rerun `dvc repro {stage}`")
    return logits


def log_probabilities(probs: np.ndarray) -> np.ndarray:
    """Probabilities as logits (softmax(log p) == p), floored so a 0 stays finite."""
    return np.log(np.clip(probs, PROB_FLOOR, 1.0))


def mix_soft_targets(teacher_logits: np.ndarray, other_logits: np.ndarray, other_share: float) -> np.ndarray:
    """Logits of the averaged distribution (1 - share) * softmax(teacher) + share * softmax(other)."""
    return mix_ensemble(teacher_logits, [(other_logits, other_share)])


def mix_ensemble(teacher_logits: np.ndarray, others: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Logits of the averaged distribution: each of ``others`` (logits, share) weighs its share, the
    teacher what they leave.

    The average is taken over probabilities (an ensemble's prediction), then returned as
    log-probabilities so the KD loss can soften it with its temperature like any teacher's logits.
    """
    total = sum(share for _, share in others)
    if any(not 0.0 <= share <= 1.0 for _, share in others) or total > 1.0 + 1e-9:
        raise ValueError(f"shares {[share for _, share in others]} must be in [0, 1] each and sum to at most 1")
    probs = (1.0 - total) * _softmax(teacher_logits)
    for logits, share in others:
        if logits.shape != teacher_logits.shape:
            raise ValueError(f"teacher logits {teacher_logits.shape} and other logits {logits.shape} differ in shape")
        probs = probs + share * _softmax(logits)
    return log_probabilities(probs).astype(np.float32)


def average_at(shares: tuple[float, ...], probs: list[np.ndarray]) -> np.ndarray:
    """The members' probabilities averaged at ``shares`` (in ``probs``' order)."""
    return sum(w * p for w, p in zip(shares, probs))


def shares_on_validation(probs: list[np.ndarray], labels: np.ndarray, step: float = 0.1) -> tuple[tuple[float, ...], float]:
    """The members' shares, on a grid of ``step`` over the simplex, whose probability average
    scores best on ``labels``; ties go to the shares closest to equal ones. Returns (shares in
    ``probs``' order, the accuracy they reach). Choose on a validation split, score elsewhere."""
    if not probs or any(p.shape != probs[0].shape for p in probs) or len(probs[0]) != len(labels):
        raise ValueError(f"probs {[p.shape for p in probs]} must share one shape with {len(labels)} rows")
    units = round(1.0 / step)
    if units < 1 or abs(units * step - 1.0) > 1e-9:
        raise ValueError(f"step {step} must divide 1")
    best: tuple[float, float, tuple[float, ...]] | None = None
    for head in itertools.product(range(units + 1), repeat=len(probs) - 1):
        if sum(head) > units:
            continue
        shares = tuple(h / units for h in (*head, units - sum(head)))
        accuracy = float((average_at(shares, probs).argmax(axis=1) == labels).mean())
        spread = float(np.abs(np.array(shares) - 1.0 / len(probs)).sum())
        if best is None or (accuracy, -spread) > (best[0], -best[1]):
            best = (accuracy, spread, shares)
    return best[2], best[0]


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)
