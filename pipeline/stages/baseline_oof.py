"""baseline_oof: TF-IDF + LR's out-of-fold probabilities on the training texts, for ensemble distillation.

The training split is cut into five stratified folds (``pipeline.tfidf.FOLDS``); each fold is scored
by the ``baseline`` section's TF-IDF + LR fitted on the other folds plus, when
the dataset's description names an intermediate task, its labelled training texts (never scored
themselves). A model's scores on texts it was fitted on are near-certain and tell the student
nothing the labels don't; out-of-fold scores are what the model knows. The ``soft_targets`` stage
averages them with the other sources' (``soft_targets.shares.tfidf``). With a share of 0 nothing is fitted and
the file holds no columns. The transfer
set's unlabelled texts (stage ``transfer_set``) are scored by one more model, fitted on every
training text (plus the intermediate task's), into a second file. The fits run in parallel processes,
one a core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.io import read_table
from pipeline.params import Params, load_params
from pipeline.soft_targets import UNLABELLED, save_logits
from pipeline.splits import load_split, prepared, split_path
from pipeline.stages.common import finish_stage
from pipeline.tfidf import FOLDS, fold_jobs, out_of_fold_logits
from pipeline.tracking import stage_run


def run(params: Params, train: pd.DataFrame, extra: pd.DataFrame | None,
        transfer: list[str]) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """TF-IDF's out-of-fold logits on the training rows (``extra``: the intermediate task's rows, in every fold's
    training part) and the full model's on the ``transfer`` texts, at ``soft_targets.shares.tfidf`` (0: no columns)."""
    return out_of_fold_logits(params.baseline, params.train.seed, params.soft_targets.shares.tfidf, train, extra,
                              fold_jobs(FOLDS + bool(transfer)), transfer, params.train.class_weights)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("models/baseline_oof/train.npz"))
    parser.add_argument("--transfer", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--transfer-out", type=Path, default=Path("models/baseline_oof/transfer.npz"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baseline_oof.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    intermediate = prepared(args.data).intermediate is not None
    paths = [split_path(args.data, "train"), args.transfer]
    if intermediate:
        paths.append(split_path(args.data, "train", intermediate=True))
    with stage_run("baseline_oof", params, paths) as tracker:
        train = load_split(args.data, "train")
        extra = load_split(args.data, "train", intermediate=True) if intermediate else None
        transfer = read_table(args.transfer, ["text"])["text"].tolist()
        logits, transfer_logits, metrics = run(params, train, extra, transfer)
        save_logits(args.out, logits, train["label"].to_numpy())
        save_logits(args.transfer_out, transfer_logits, np.full(len(transfer), UNLABELLED))
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
