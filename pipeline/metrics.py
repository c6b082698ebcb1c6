"""Classification metrics as pure functions of labels and logits (numpy)."""

from __future__ import annotations

import numpy as np


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
