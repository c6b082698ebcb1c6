"""A fine-tuned classifier averaged with TF-IDF + logistic regression: how far does a second model family go?

Fits the baseline stage's TF-IDF + LR (params.yaml's ``baseline`` section) on the task's
training split, and again on it plus the intermediate task's labelled training texts (SST-2's: the IMDb
reviews) when the dataset's description names one; averages each one's
probabilities with ``--model``'s (a fine-tuned checkpoint, read through the task's windows),
the weight chosen on the validation split in steps of 0.1, and scores the test split of record.
Writes benchmarks/results/ensemble.json (and prints it).

    python benchmarks/ensemble.py --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json \\
        --model <run>/models/finetune/model.safetensors
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from common import ROOT, add_params_args, load_with_overrides, parse_overrides

from minibert.checkpoint import load_model
from minibert.runtime import softmax
from minibert.tokenizer import load_tokenizer
from pipeline.metrics import classification_metrics
from pipeline.scoring import validation
from pipeline.splits import load_split, prepared
from pipeline.tfidf import fit_baseline

WEIGHTS = np.round(np.linspace(0.0, 1.0, 11), 1)  # the fine-tuned model's share of the average


def accuracy(prob: np.ndarray, labels: np.ndarray) -> float:
    return classification_metrics(labels, prob)["accuracy"]


def best_weight(model_val: np.ndarray, other_val: np.ndarray, labels: np.ndarray) -> float:
    """The weight w of w * model + (1 - w) * other with the best validation accuracy (the smaller on ties)."""
    scores = [accuracy(w * model_val + (1 - w) * other_val, labels) for w in WEIGHTS]
    return float(WEIGHTS[int(np.argmax(scores))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--model", type=Path, required=True, help="a fine-tuned classifier checkpoint")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    task = params.task
    tok = load_tokenizer(args.tokenizer)
    train, val, test = (load_split(args.data, split) for split in ("train", "val", "test"))
    model, _, _ = load_model(args.model)
    val_prob, test_prob = (softmax(validation(tok, df, task)[0](model)) for df in (val, test))
    y_val, y_test = val["label"].to_numpy(), test["label"].to_numpy()
    record: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "model": str(args.model),
                    "task": params.data.dataset, "model_test_accuracy": accuracy(test_prob, y_test)}
    fits = {"tfidf": train}
    intermediate = prepared(args.data).intermediate
    if intermediate is not None:  # and again with its labelled texts (SST-2: "tfidf+imdb")
        fits[f"tfidf+{intermediate}"] = pd.concat([train, load_split(args.data, "train", intermediate=True)])
    for name, rows in fits.items():
        baseline, metrics = fit_baseline(params.baseline, rows, val)
        other_val, other_test = baseline.predict_proba(val["text"]), baseline.predict_proba(test["text"])
        w = best_weight(val_prob, other_val, y_val)
        record[name] = {"train_rows": len(rows), "fit_seconds": metrics["train_seconds"],
                        "test_accuracy": accuracy(other_test, y_test), "weight_on_val": w,
                        "average_test_accuracy": accuracy(w * test_prob + (1 - w) * other_test, y_test),
                        "average_0.5_test_accuracy": accuracy(0.5 * test_prob + 0.5 * other_test, y_test)}
    print(json.dumps(record, indent=1))
    (ROOT / "benchmarks" / "results" / "ensemble.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
