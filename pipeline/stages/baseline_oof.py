"""baseline_oof: TF-IDF + LR's out-of-fold probabilities on the training texts, for ensemble distillation.

The training split is cut into ``distill.ensemble.folds`` stratified folds; each fold is scored
by the ``baseline`` section's TF-IDF + LR fitted on the other folds plus, when
``distill.ensemble.extra_task`` names one, that task's labelled training texts (never scored
themselves). A model's scores on texts it was fitted on are near-certain and tell the student
nothing the labels don't; out-of-fold scores are what the model knows. ``distill`` averages them
with the teacher's (``distill.ensemble.baseline_share``). With a share of 0 nothing is fitted and
the file holds no columns, so profiles that keep the teacher alone pay nothing. The transfer
set's unlabelled texts (stage ``transfer_set``) are scored by one more model, fitted on every
training text (plus the extra task's), into a second file. The fits run in parallel processes,
one a core.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold
from sklearn.utils.parallel import Parallel, delayed

from pipeline.io import DataError, read_table
from pipeline.metrics import classification_metrics
from pipeline.params import BaselineParams, EnsembleParams, Params, load_params
from pipeline.soft_targets import UNLABELLED, log_probabilities, save_logits
from pipeline.splits import load_split, split_path
from pipeline.stages.baseline import build_baseline
from pipeline.stages.common import finish_stage
from pipeline.tracking import stage_run


def out_of_fold(cfg: BaselineParams, train: pd.DataFrame, extra: pd.DataFrame | None, folds: int, seed: int,
                jobs: int = 1, unlabelled: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(len(train), num_labels) probabilities, each row from a model that never saw it, and
    (len(unlabelled), num_labels) from a model fitted on every training row."""
    labels = train["label"].to_numpy()
    num_labels = int(max(labels.max(), -1 if extra is None else extra["label"].max())) + 1
    smallest = np.bincount(labels, minlength=num_labels).min()
    if smallest < folds:
        raise DataError(f"the training split has a label with {smallest} rows, fewer than distill.ensemble.folds "
                        f"({folds}); lower the folds or use more rows")
    extra = extra if extra is not None else train.iloc[:0]
    splits = StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(train)), labels)
    jobs_list = [(fit, train["text"].iloc[held], held) for fit, held in splits]
    if len(unlabelled):
        jobs_list.append((np.arange(len(train)), pd.Series(list(unlabelled), dtype=str), None))

    def fit_and_score(fit_rows: np.ndarray, texts: pd.Series,
                      held: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        fit = pd.concat([train.iloc[fit_rows], extra])
        model = build_baseline(cfg).fit(fit["text"], fit["label"])
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


def run(cfg: BaselineParams, ensemble: EnsembleParams, train: pd.DataFrame, extra: pd.DataFrame | None,
        jobs: int, unlabelled: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray, dict]:
    """(N, L) out-of-fold log-probabilities, (M, L) on the ``unlabelled`` texts (L = 0 when the share
    is 0) and the stage's metrics."""
    if ensemble.baseline_share == 0:
        empty = np.zeros((len(train), 0), np.float32), np.zeros((len(unlabelled), 0), np.float32)
        return *empty, {"rows": len(train), "transfer_rows": len(unlabelled), "skipped": True}
    start = time.perf_counter()
    probs, unlabelled_probs = out_of_fold(cfg, train, extra, ensemble.folds, ensemble.seed, jobs, unlabelled)
    metrics = {f"oof_{k}": v for k, v in classification_metrics(train["label"].to_numpy(), probs).items()}
    return log_probabilities(probs), log_probabilities(unlabelled_probs), {
        **metrics, "rows": len(train), "extra_rows": 0 if extra is None else len(extra), "transfer_rows": len(unlabelled),
        "folds": ensemble.folds, "seconds": time.perf_counter() - start, "skipped": False}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("models/baseline_oof/train.npz"))
    parser.add_argument("--transfer", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--transfer-out", type=Path, default=Path("models/baseline_oof/transfer.npz"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baseline_oof.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    task, ensemble = params.task, params.distill.ensemble
    paths = [split_path(args.data, task, "train"), args.transfer]
    extra_task = None if ensemble.extra_task == "none" else dataclasses.replace(task, name=ensemble.extra_task)
    if extra_task is not None:
        paths.append(split_path(args.data, extra_task, "train"))
    with stage_run("baseline_oof", params, paths) as tracker:
        train = load_split(args.data, task, "train")
        extra = None if extra_task is None else load_split(args.data, extra_task, "train")
        transfer = read_table(args.transfer, ["text"])["text"].tolist()
        logits, transfer_logits, metrics = run(params.baseline, ensemble, train, extra,
                                               fold_jobs(ensemble.folds + bool(transfer)), transfer)
        save_logits(args.out, logits, train["label"].to_numpy())
        save_logits(args.transfer_out, transfer_logits, np.full(len(transfer), UNLABELLED))
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
