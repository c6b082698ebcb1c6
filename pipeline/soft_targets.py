"""Soft targets: each source's cached (N, L) logit file, their mix, and the one file distillation reads.

The sources: ``teacher_logits`` writes the fine-tuned teacher's logits on the training rows and the
transfer set; ``baseline_oof`` the TF-IDF model's out-of-fold log-probabilities on the training
texts; ``cnn`` the word-CNN's logits on the training rows. Each file carries the labels of the
rows it was computed on, so a file left stale by a data or task change is refused instead of
silently misaligned. The ``soft_targets`` stage averages the sources' probabilities at their shares
into ``SoftTargets`` (``save_soft_targets``): the seam every student learns through.
Torch-free: the TF-IDF stage never loads torch for it.
"""

from __future__ import annotations

import itertools
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.io import DataError, atomic_path, read_table, write_json, write_table

PROB_FLOOR = 1e-6  # log(0) guard for probabilities that round to 0
UNLABELLED = -1  # the label stored for rows of the transfer set, which have none


def save_logits(path: Path, logits: np.ndarray, labels: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:  # a handle: np.savez would append .npz to a bare name
            np.savez(handle, logits=logits.astype(np.float32), labels=labels.astype(np.int64))


def not_a_source(train_out: Path, transfer_out: Path, labels: np.ndarray, transfer_labels: np.ndarray) -> dict[str, Any]:
    """A source whose share is 0 scores nothing: its logit files for the training rows and the transfer set's rows
    hold no columns (the rows' labels still ride along). Returns the skipping stage's metrics."""
    save_logits(train_out, np.zeros((len(labels), 0)), labels)
    save_logits(transfer_out, np.zeros((len(transfer_labels), 0)), transfer_labels)
    return {"rows": len(labels), "transfer_rows": len(transfer_labels), "skipped": True}


def load_logits(path: Path, labels: np.ndarray, stage: str = "teacher_logits") -> np.ndarray:
    """(N, L) logits from ``path`` (written by ``stage``), checked against the ``labels`` of the rows in use
    (``combine`` checks that the sources agree on L)."""
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
    return logits


def log_probabilities(probs: np.ndarray) -> np.ndarray:
    """Probabilities as logits (softmax(log p) == p), floored so a 0 stays finite."""
    return np.log(np.clip(probs, PROB_FLOOR, 1.0))


def mix_soft_targets(teacher_logits: np.ndarray, other_logits: np.ndarray, other_share: float) -> np.ndarray:
    """Logits of the averaged distribution (1 - share) * softmax(teacher) + share * softmax(other)."""
    return mix_ensemble(teacher_logits, [(other_logits, other_share)])


def mix_ensemble(teacher_logits: np.ndarray, others: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Logits of the averaged distribution: each of ``others`` (logits, share) weighs its share, the
    teacher what they leave (``mix``)."""
    total = sum(share for _, share in others)
    if any(not 0.0 <= share <= 1.0 for _, share in others) or total > 1.0 + 1e-9:
        raise ValueError(f"shares {[share for _, share in others]} must be in [0, 1] each and sum to at most 1")
    return mix([(teacher_logits, 1.0 - total), *others])


def mix(members: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Logits of the distribution sum(share * softmax(logits)) over ``members`` (logits, share), in order.

    The average is taken over probabilities (an ensemble's prediction), then returned as
    log-probabilities so the KD loss can soften it with its temperature like any teacher's logits.
    """
    if not members:
        raise ValueError("nothing to mix: give at least one source")
    first = members[0][0]
    probs = None
    for logits, share in members:
        if logits.shape != first.shape:
            raise ValueError(f"source logits {first.shape} and {logits.shape} differ in shape")
        term = share * _softmax(logits)
        probs = term if probs is None else probs + term
    return log_probabilities(probs).astype(np.float32)


STAGES = {"teacher": "teacher_logits", "tfidf": "baseline_oof", "word_cnn": "cnn"}  # the stage that writes each source


def source_logits(name: str, path: Path, labels: np.ndarray, text_labels: np.ndarray, text_index: np.ndarray) -> np.ndarray:
    """A source's (rows, L) logits from ``path``: per row (teacher, word-CNN), or per text (TF-IDF) spread
    to the rows through ``text_index``; checked against the rows' (or texts') labels."""
    if name == "tfidf":
        return load_logits(path, text_labels, STAGES[name])[text_index]
    return load_logits(path, labels, STAGES[name])


def combine(shares: dict[str, float], rows: dict[str, np.ndarray]) -> np.ndarray:
    """The mix of the sources' ``rows`` logits (name -> logits, every source with a share) at their ``shares``
    (``SharesParams.of``), added in that order; one source alone passes its logits through as they are."""
    shares = {name: share for name, share in shares.items() if share > 0}
    widths = {name: rows[name].shape[1] for name in shares}
    if len(set(widths.values())) != 1:
        raise DataError(f"the sources' label columns differ ({widths}); rerun their stages on the same data")
    if len(shares) == 1:
        return rows[next(iter(shares))].astype(np.float32)
    return mix([(rows[name], share) for name, share in shares.items()])


@dataclass(frozen=True)
class SoftTargets:
    """What a student learns: (N, L) target logits on the training rows (with their labels) and (M, L) on
    the transfer set's rows (its texts cut as the training texts are: a row each, or a row a window), the
    texts, and the manifest of where they came from."""

    train: np.ndarray
    labels: np.ndarray
    transfer: np.ndarray
    transfer_texts: list[str]
    manifest: dict[str, Any]


TARGETS, TRANSFER_TEXTS, MANIFEST = "targets.npz", "transfer.parquet", "manifest.json"


def save_soft_targets(folder: Path, targets: SoftTargets) -> None:
    """The targets, the transfer set's texts and the manifest under ``folder``; the manifest last."""
    with atomic_path(folder / TARGETS) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, train=targets.train.astype(np.float32), labels=targets.labels.astype(np.int64),
                     transfer=targets.transfer.astype(np.float32))
    write_table(pd.DataFrame({"text": pd.Series(targets.transfer_texts, dtype=str)}), folder / TRANSFER_TEXTS)
    write_json(targets.manifest, folder / MANIFEST)


def load_soft_targets(folder: Path) -> SoftTargets:
    """The ``soft_targets`` stage's output; DataError naming the file when it is missing or damaged."""
    for name in (TARGETS, TRANSFER_TEXTS, MANIFEST):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} not found; run `dvc repro soft_targets` first")
    try:
        with np.load(folder / TARGETS) as data:
            train, labels, transfer = data["train"], data["labels"], data["transfer"]
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"{folder}: not a soft_targets folder ({err}); delete it and rerun `dvc repro soft_targets`") from err
    texts = read_table(folder / TRANSFER_TEXTS, ["text"])["text"].astype(str).tolist()
    if len(train) != len(labels) or train.shape[1:] != transfer.shape[1:]:
        raise DataError(f"{folder}: {train.shape} training targets for {len(labels)} labels and {transfer.shape} transfer "
                        "targets do not fit; rerun `dvc repro soft_targets`")
    return SoftTargets(train, labels, transfer, texts, manifest)


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
