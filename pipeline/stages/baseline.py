"""baseline: TF-IDF + logistic regression (scikit-learn) on the same SST-2 splits.

The yardstick every report carries, so it is plain what the transformer buys. The reference
figure on this machine (data README): uni+bigrams, sublinear tf, min_df 2, C=4 -> 82.0 on dev.
The fitted scikit-learn pipeline is written with skops (no pickle: loading it runs no code).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from minibert.files import ArtifactError
from pipeline.io import atomic_path
from pipeline.metrics import classification_metrics
from pipeline.params import BaselineParams, Params, load_params
from pipeline.splits import load_split, split_path


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


def build_baseline(cfg: BaselineParams) -> Pipeline:
    """The unfitted TF-IDF + logistic regression pipeline of the ``baseline`` section."""
    return Pipeline([
        ("tfidf", TfidfVectorizer(ngram_range=(1, cfg.ngram_max), min_df=cfg.min_df, sublinear_tf=cfg.sublinear_tf)),
        ("logreg", LogisticRegression(C=cfg.C, max_iter=cfg.max_iter)),
    ])


def run(cfg: BaselineParams, train: pd.DataFrame, val: pd.DataFrame) -> tuple[Pipeline, dict[str, float]]:
    start = time.perf_counter()
    model = build_baseline(cfg)
    model.fit(train["text"], train["label"])
    seconds = time.perf_counter() - start
    val_metrics = classification_metrics(val["label"].to_numpy(), model.predict_proba(val["text"]))
    return model, {**{f"val_{k}": v for k, v in val_metrics.items()}, "train_seconds": seconds,
                   "features": len(model.named_steps["tfidf"].vocabulary_)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("models/baseline/model.skops"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baseline.json"))
    args = parser.parse_args(argv)
    import skops.io

    from pipeline.stages.common import finish_stage  # mlflow only where a stage logs: the functions above serve
    from pipeline.tracking import stage_run  # benchmarks on machines without it (benchmarks/gpu_session.sh)
    params: Params = load_params()
    train_path, val_path = split_path(args.data, params.task, "train"), split_path(args.data, params.task, "val")
    with stage_run("baseline", params, [train_path, val_path]) as tracker:
        train, val = load_split(args.data, params.task, "train"), load_split(args.data, params.task, "val")
        tracker.log_dataset(train, train_path.stem, train_path, context="training")
        model, metrics = run(params.baseline, train, val)
        with atomic_path(args.out) as tmp:
            skops.io.dump(model, tmp)
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
