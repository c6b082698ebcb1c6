"""soft_targets: what the student learns, in one file: the sources' class probabilities averaged at their shares.

The sources are configured in one place, the ``soft_targets`` section: the fine-tuned teacher
(stage ``teacher_logits``), TF-IDF + LR scored out of fold (stage ``baseline_oof``) and the
word-level CNN (stage ``cnn``), each with a share of the average; a source with share 0 computes
nothing and is not read here. Rows are the task's training rows as ``encode_train`` cuts them (the
TF-IDF's per-text scores spread to each row of their text) and the transfer set's texts (stage
``transfer_set``). The output folder holds the targets, the transfer set's texts and a manifest of
the sources and shares: ``distill`` reads nothing else of them, so a new source plugs in here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from minibert.tokenizer import load_tokenizer
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.soft_targets import STAGES, SoftTargets, combine, save_soft_targets, source_logits
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import encode_train_indexed
from pipeline.tracking import stage_run
from pipeline.transfer_texts import load_transfer_split


def run(shares: dict[str, float], train: dict[str, np.ndarray], labels: np.ndarray,
        transfer: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, dict]:
    """(training targets, transfer-set targets, metrics: each source's and the mix's accuracy on the training rows)."""
    targets = combine(shares, train)
    transfer_targets = combine(shares, transfer) if len(next(iter(transfer.values()))) else np.zeros((0, targets.shape[1]), np.float32)
    metrics = {f"{name}_train_accuracy": classification_metrics(labels, logits)["accuracy"] for name, logits in train.items()}
    metrics["train_accuracy"] = classification_metrics(labels, targets)["accuracy"]
    return targets, transfer_targets, metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--transfer", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--teacher", type=Path, default=Path("models/teacher_logits"), help="folder of train.npz, transfer.npz")
    parser.add_argument("--tfidf", type=Path, default=Path("models/baseline_oof"), help="folder of train.npz, transfer.npz")
    parser.add_argument("--word-cnn", type=Path, default=Path("models/cnn"), help="folder of train.npz, transfer.npz")
    parser.add_argument("--out", type=Path, default=Path("models/soft_targets"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/soft_targets.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    shares, task = params.soft_targets.shares.of(), params.task
    folders = {"teacher": args.teacher, "tfidf": args.tfidf, "word_cnn": args.word_cnn}
    active = [name for name, share in shares.items() if share > 0]
    train_path = split_path(args.data, "train")
    inputs = [train_path, args.transfer, args.tokenizer, *(folders[name] / "train.npz" for name in active)]
    with stage_run("soft_targets", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        train_df, transfer_df = load_split(args.data, "train"), load_transfer_split(args.transfer)
        _, labels, text_index = encode_train_indexed(tok, train_df, task)
        _, transfer_labels, transfer_index = encode_train_indexed(tok, transfer_df, task)
        train_rows = {name: source_logits(name, folders[name] / "train.npz", labels, train_df["label"].to_numpy(), text_index)
                      for name in active}
        transfer_rows = {name: source_logits(name, folders[name] / "transfer.npz", transfer_labels,
                                             transfer_df["label"].to_numpy(), transfer_index) for name in active}
        targets, transfer_targets, metrics = run(shares, train_rows, labels, transfer_rows)
        manifest = {"sources": {name: {"share": share, "stage": STAGES[name], "train_accuracy": metrics.get(f"{name}_train_accuracy")}
                                for name, share in shares.items()},
                    "classes": int(targets.shape[1]), "rows": len(labels), "transfer_rows": len(transfer_labels),
                    "rows_cut_as": {"max_length": task.max_length, "stride": task.stride, "truncation": task.truncation}}
        save_soft_targets(args.out, SoftTargets(targets, labels, transfer_targets, transfer_df["text"].tolist(), manifest))
        finish_stage(tracker, {**metrics, "rows": len(labels), "transfer_rows": len(transfer_labels),
                               "sources": len(active)}, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
