"""baseline: TF-IDF + logistic regression (scikit-learn) on the same SST-2 splits.

The yardstick every report carries, so it is plain what the transformer buys. The reference
figure on this machine (data README): uni+bigrams, sublinear tf, min_df 2, C=4 -> 82.0 on dev.
The fitted scikit-learn pipeline is written with skops (no pickle: loading it runs no code).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from sklearn.pipeline import Pipeline

from pipeline.io import atomic_path
from pipeline.params import Params, load_params
from pipeline.splits import load_split, split_path
from pipeline.tfidf import fit_baseline


def run(params: Params, train: pd.DataFrame, val: pd.DataFrame) -> tuple[Pipeline, dict[str, float]]:
    """TF-IDF + logistic regression fitted on ``train`` (``baseline`` section, ``train.class_weights``), with its
    validation metrics."""
    return fit_baseline(params.baseline, train, val, params.train.class_weights)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("models/baseline/model.skops"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baseline.json"))
    args = parser.parse_args(argv)
    import skops.io

    from pipeline.stages.common import finish_stage  # mlflow only where a stage logs
    from pipeline.tracking import stage_run
    params: Params = load_params()
    train_path, val_path = split_path(args.data, "train"), split_path(args.data, "val")
    with stage_run("baseline", params, [train_path, val_path]) as tracker:
        train, val = load_split(args.data, "train"), load_split(args.data, "val")
        tracker.log_dataset(train, train_path.stem, train_path, context="training")
        model, metrics = run(params, train, val)
        with atomic_path(args.out) as tmp:
            skops.io.dump(model, tmp)
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
