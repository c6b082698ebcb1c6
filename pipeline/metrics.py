"""Classification metrics as pure functions of labels and logits (numpy), and single-text latency."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

LATENCY_ROWS = 64  # texts timed one at a time for p50 / p95 single-text latency (evaluate, promote)


def classification_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-F1 (the unweighted mean of each class's F1; classes: ``logits``' columns) of argmax predictions."""
    labels, logits = np.asarray(labels), np.asarray(logits)
    predictions = logits.argmax(axis=-1)
    f1 = [c["f1"] for c in per_class(labels, predictions, logits.shape[-1]).values()]
    return {"accuracy": float((predictions == labels).mean()) if len(labels) else 0.0, "macro_f1": float(np.mean(f1))}


def per_class(labels: np.ndarray, predictions: np.ndarray, classes: int | tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Each class's precision, recall, F1 and support (test rows of it), keyed by its name (or index)."""
    names = tuple(str(i) for i in range(classes)) if isinstance(classes, int) else tuple(classes)
    matrix = confusion_matrix(labels, predictions, len(names))
    out = {}
    for i, name in enumerate(names):
        tp, predicted, actual = matrix[i, i], matrix[:, i].sum(), matrix[i].sum()
        precision, recall = tp / max(predicted, 1), tp / max(actual, 1)
        out[name] = {"precision": float(precision), "recall": float(recall),
                     "f1": float(2 * tp / max(predicted + actual, 1)), "support": int(actual)}
    return out


def percentiles_ms(seconds: list[float]) -> dict[str, float]:
    """p50 / p95 of latencies given in seconds, in milliseconds."""
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95))}


def single_text_latency(predict: Callable[[list[str]], object], texts: list[str]) -> dict[str, float]:
    """p50 / p95 milliseconds of ``predict([text])`` over ``texts``, one at a time, after one warm-up."""
    predict(texts[:1])
    seconds = []
    for text in texts:
        start = time.perf_counter()
        predict([text])
        seconds.append(time.perf_counter() - start)
    return percentiles_ms(seconds)


def class_probabilities(scores: np.ndarray, probabilities: bool) -> np.ndarray:
    """(N, K) class probabilities from ``scores``: as given, or the softmax of logits (without overflow)."""
    scores = np.asarray(scores, dtype=np.float64)
    if probabilities:
        return scores
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def confusion_matrix(labels: np.ndarray, predictions: np.ndarray, classes: int = 2) -> np.ndarray:
    """(classes, classes) counts, rows the true label, columns the prediction."""
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(labels, dtype=np.int64), np.asarray(predictions, dtype=np.int64)), 1)
    return matrix


CALIBRATION_BINS = 10  # equal-width confidence bins over [1/K, 1] (reliability diagram, ECE)


def reliability(labels: np.ndarray, probabilities: np.ndarray, bins: int = 10) -> tuple[list[dict[str, float]], float]:
    """Reliability table of a K-class classifier's top label and its expected calibration error (ECE).

    Confidence is the probability of the predicted label (1/K to 1), binned into ``bins`` equal widths over
    [1/K, 1]; each non-empty bin gives its row count, mean confidence and accuracy.
    ECE = sum over bins of (rows / N) * |accuracy - confidence| (Guo et al. 2017).
    """
    labels, p = np.asarray(labels), np.asarray(probabilities, dtype=np.float64)
    low = 1.0 / p.shape[-1]
    predicted = p.argmax(axis=-1)
    confidence = p.max(axis=-1)
    correct = (predicted == labels).astype(np.float64)
    width = (1.0 - low) / bins
    index = np.clip(((confidence - low) / width).astype(np.int64), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        members = index == b
        if not members.any():
            continue
        conf, acc = float(confidence[members].mean()), float(correct[members].mean())
        rows.append({"low": low + b * width, "high": low + (b + 1) * width, "rows": int(members.sum()),
                     "confidence": conf, "accuracy": acc})
        ece += members.mean() * abs(acc - conf)
    return rows, float(ece)
