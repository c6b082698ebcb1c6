"""Classification metrics as pure functions of labels and logits (numpy), and single-text latency."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

LATENCY_ROWS = 64  # texts timed one at a time for p50 / p95 single-text latency (evaluate, promote)


def classification_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """Accuracy and binary F1 (positive class 1) of argmax predictions."""
    labels = np.asarray(labels)
    predictions = np.asarray(logits).argmax(axis=-1)
    tp = int(((predictions == 1) & (labels == 1)).sum())
    fp = int(((predictions == 1) & (labels == 0)).sum())
    fn = int(((predictions == 0) & (labels == 1)).sum())
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    return {"accuracy": float((predictions == labels).mean()), "f1": float(f1)}


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


def positive_probability(scores: np.ndarray, probabilities: bool) -> np.ndarray:
    """P(label 1) from (N, 2) ``scores``: the second column of probabilities, or softmax of logits."""
    scores = np.asarray(scores, dtype=np.float64)
    if probabilities:
        return scores[:, 1]
    return 1.0 / (1.0 + np.exp(scores[:, 0] - scores[:, 1]))  # softmax of two logits, without overflow


def confusion_matrix(labels: np.ndarray, predictions: np.ndarray, classes: int = 2) -> np.ndarray:
    """(classes, classes) counts, rows the true label, columns the prediction."""
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(labels, dtype=np.int64), np.asarray(predictions, dtype=np.int64)), 1)
    return matrix


def reliability(labels: np.ndarray, p_positive: np.ndarray, bins: int = 10) -> tuple[list[dict[str, float]], float]:
    """Reliability table of a binary classifier and its expected calibration error (ECE).

    Confidence is the probability of the predicted label (0.5 to 1), binned into ``bins`` equal
    widths over [0.5, 1]; each non-empty bin gives its row count, mean confidence and accuracy.
    ECE = sum over bins of (rows / N) * |accuracy - confidence| (Guo et al. 2017).
    """
    labels, p = np.asarray(labels), np.asarray(p_positive, dtype=np.float64)
    predicted = (p >= 0.5).astype(np.int64)
    confidence = np.where(predicted == 1, p, 1.0 - p)
    correct = (predicted == labels).astype(np.float64)
    index = np.minimum(((confidence - 0.5) * 2 * bins).astype(np.int64), bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        members = index == b
        if not members.any():
            continue
        conf, acc = float(confidence[members].mean()), float(correct[members].mean())
        rows.append({"low": 0.5 + b / (2 * bins), "high": 0.5 + (b + 1) / (2 * bins), "rows": int(members.sum()),
                     "confidence": conf, "accuracy": acc})
        ece += members.mean() * abs(acc - conf)
    return rows, float(ece)
