"""Temperature scaling (Guo et al. 2017): one scalar T that divides a classifier's logits so that its
probabilities match how often it is right, fitted on held-out rows by minimising the negative log-likelihood.
Dividing by T > 0 keeps every argmax, so accuracy is unchanged. Torch-free (numpy), as serving is.

The NLL is convex in the inverse temperature (a log-sum-exp of a linear function minus a linear term), so a
golden-section search over it finds the one minimum.
"""

from __future__ import annotations

import numpy as np

BOUNDS = (0.05, 20.0)  # the temperatures searched
ITERATIONS = 80  # golden-section steps: the bracket shrinks to ~1e-16 of its width


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of ``labels`` under softmax(logits / temperature)."""
    scaled = log_softmax(np.asarray(logits, dtype=np.float64) / temperature)
    return float(-scaled[np.arange(len(labels)), labels].mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The temperature in ``BOUNDS`` minimising the NLL of ``labels``; 1.0 for no rows."""
    if len(labels) == 0:
        return 1.0
    logits, labels = np.asarray(logits, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    lo, hi = 1.0 / BOUNDS[1], 1.0 / BOUNDS[0]  # over the inverse temperature, where the NLL is convex
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(logits, labels, 1.0 / a), nll(logits, labels, 1.0 / b)
    for _ in range(ITERATIONS):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(logits, labels, 1.0 / a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(logits, labels, 1.0 / b)
    return float(2.0 / (lo + hi))
