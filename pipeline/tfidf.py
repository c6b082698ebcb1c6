"""TF-IDF + logistic regression (scikit-learn): the yardstick every report carries, and a soft-target
source scored out of fold.

``fit_baseline`` fits the ``baseline`` section's pipeline (the ``baseline`` stage writes it with skops,
no pickle: loading it runs no code); ``out_of_fold`` scores each training text with a model that never
saw it (the ``baseline_oof`` stage), so the student learns what the model knows, not what it memorised.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.utils.parallel import Parallel, delayed

from minibert.files import ArtifactError
from pipeline.io import DataError
from pipeline.metrics import classification_metrics
from pipeline.params import BaselineParams
from pipeline.soft_targets import log_probabilities

FOLDS = 5  # out of fold: each training text scored by a model fitted on the other four fifths
MAX_ITER = 2000  # the logistic regression's solver iterations


def load_baseline(path: Path) -> Pipeline:
    """The fitted pipeline from a skops file; only types skops trusts by default are rebuilt."""
    import skops.io  # only where a model is read or written: fitting needs scikit-learn alone

    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run the baseline stage first (dvc repro baseline)")
    try:
        return skops.io.load(path)
    except Exception as err:  # damaged zip, or a type skops does not trust: never load it anyway
        raise ArtifactError(f"{path} is not a loadable skops baseline ({type(err).__name__}: {err}); "
                            "delete it and rerun `dvc repro baseline`") from err


def build_baseline(cfg: BaselineParams, class_weights: str = "none") -> Pipeline:
    """The unfitted TF-IDF + logistic regression pipeline of the ``baseline`` section (``class_weights``:
    ``train.class_weights``; balanced is scikit-learn's n / (K n_class))."""
    return Pipeline([
        ("tfidf", TfidfVectorizer(ngram_range=(1, cfg.ngram_max), min_df=cfg.min_df, sublinear_tf=True)),
        ("logreg", LogisticRegression(C=cfg.C, max_iter=MAX_ITER, class_weight=None if class_weights == "none" else "balanced")),
    ])


def fit_baseline(cfg: BaselineParams, train: pd.DataFrame, val: pd.DataFrame,
                 class_weights: str = "none") -> tuple[Pipeline, dict[str, float]]:
    start = time.perf_counter()
    model = build_baseline(cfg, class_weights)
    model.fit(train["text"], train["label"])
    seconds = time.perf_counter() - start
    val_metrics = classification_metrics(val["label"].to_numpy(), model.predict_proba(val["text"]))
    return model, {**{f"val_{k}": v for k, v in val_metrics.items()}, "train_seconds": seconds,
                   "features": len(model.named_steps["tfidf"].vocabulary_)}


def out_of_fold(cfg: BaselineParams, train: pd.DataFrame, extra: pd.DataFrame | None, folds: int, seed: int,
                jobs: int = 1, unlabelled: Sequence[str] = (), class_weights: str = "none") -> tuple[np.ndarray, np.ndarray]:
    """(len(train), num_labels) probabilities, each row from a model that never saw it, and
    (len(unlabelled), num_labels) from a model fitted on every training row."""
    labels = train["label"].to_numpy()
    num_labels = int(max(labels.max(), -1 if extra is None else extra["label"].max())) + 1
    smallest = np.bincount(labels, minlength=num_labels).min()
    if smallest < folds:
        raise DataError(f"the training split has a label with {smallest} rows, fewer than the {folds} folds the TF-IDF "
                        "source is scored out of; use more rows, or set soft_targets.shares.tfidf: 0")
    extra = extra if extra is not None else train.iloc[:0]
    splits = StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(train)), labels)
    jobs_list = [(fit, train["text"].iloc[held], held) for fit, held in splits]
    if len(unlabelled):
        jobs_list.append((np.arange(len(train)), pd.Series(list(unlabelled), dtype=str), None))

    def fit_and_score(fit_rows: np.ndarray, texts: pd.Series,
                      held: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        fit = pd.concat([train.iloc[fit_rows], extra])
        model = build_baseline(cfg, class_weights).fit(fit["text"], fit["label"])
        return held, model.classes_, model.predict_proba(texts)

    probs, unlabelled_probs = np.zeros((len(train), num_labels)), np.zeros((len(unlabelled), num_labels))
    for held, classes, scored in Parallel(n_jobs=jobs)(delayed(fit_and_score)(*job) for job in jobs_list):
        if held is None:
            unlabelled_probs[:, classes] = scored
        else:
            probs[np.ix_(held, classes)] = scored
    return probs, unlabelled_probs


def fold_jobs(folds: int) -> int:
    """Folds fitted at once: one a core, never more than there are folds."""
    return max(1, min(folds, os.cpu_count() or 1))


def out_of_fold_logits(cfg: BaselineParams, seed: int, share: float, train: pd.DataFrame, extra: pd.DataFrame | None,
                       jobs: int, unlabelled: Sequence[str] = (), class_weights: str = "none") -> tuple[np.ndarray, np.ndarray, dict]:
    """(N, L) out-of-fold log-probabilities, (M, L) on the ``unlabelled`` texts (L = 0 when TF-IDF's ``share``
    is 0: nothing is fitted) and the stage's metrics."""
    if share == 0:
        empty = np.zeros((len(train), 0), np.float32), np.zeros((len(unlabelled), 0), np.float32)
        return *empty, {"rows": len(train), "transfer_rows": len(unlabelled), "skipped": True}
    start = time.perf_counter()
    probs, unlabelled_probs = out_of_fold(cfg, train, extra, FOLDS, seed, jobs, unlabelled, class_weights)
    metrics = {f"oof_{k}": v for k, v in classification_metrics(train["label"].to_numpy(), probs).items()}
    return log_probabilities(probs), log_probabilities(unlabelled_probs), {
        **metrics, "rows": len(train), "extra_rows": 0 if extra is None else len(extra), "transfer_rows": len(unlabelled),
        "folds": FOLDS, "seconds": time.perf_counter() - start, "skipped": False}
