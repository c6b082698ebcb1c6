"""cnn: a word-level CNN (``minibert.textcnn``, Kim 2014) over the pretrained encoder's word vectors:
a soft-target source, and the word_cnn student's starting model.

Trained on the task's training rows and, when the dataset's description names an intermediate task, its labelled
texts shuffled in (IMDb reviews for SST-2, their head and tail kept), with the classifier's
length-bucketed batches, schedule, time budget and best-on-validation selection. It then scores
the training rows and the transfer set's texts, cut as ``teacher_logits`` cuts them, so the
``soft_targets`` stage averages its probabilities with the other sources' row by row
(``soft_targets.shares.word_cnn``). Why a CNN: on SST-2 it scored 85.1 dev in one 3-minute epoch
where the 4-layer encoder, fine-tuned for 13 minutes, scored 83.0, and the two disagree on a
tenth of the sentences (benchmarks/JOURNAL.md). With a share of 0 nothing is trained and the
logit files hold no columns. ``cnn.bag_buckets`` adds a hashed token n-gram bag (``minibert.ngram_bag``)
beside the convolutions; ``cnn.max_length`` / ``cnn.stride`` cut its rows and windows at its own length
(``Params.cnn_task``): one row a text still, so its rows stay the teacher's. The model file records
those windows and the label names (``minibert.contract``): a student started from it reads as it does.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tokenizers import Tokenizer

from minibert.checkpoint import check_tokenizer, load_model
from minibert.textcnn import TextCNN, TextCNNConfig, save_textcnn
from minibert.tokenizer import load_tokenizer, vocabulary_digest
from minibert.trainer import Tracker
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.scoring import chunked_logits, validation
from pipeline.soft_targets import not_a_source, save_logits
from pipeline.splits import load_split, prepared, split_path
from pipeline.task import encode_train, reads
from pipeline.transfer_texts import load_transfer_split
from pipeline.word_cnn import train_word_cnn, with_extra


@dataclass(frozen=True)
class Inputs:
    """What the cnn stage trains and scores, read and cut (``Params.cnn_task``): the pretrained encoder's word vectors
    (V, D), the rows it trains on (the task's training rows, then the intermediate task's), the training rows and
    the transfer set's rows it scores for ``soft_targets``, the validation split, and the task's class count."""

    tok: Tokenizer
    vectors: torch.Tensor
    rows: tuple[list[list[int]], np.ndarray]
    train: tuple[list[list[int]], np.ndarray]
    transfer: list[list[int]]
    val: pd.DataFrame
    num_labels: int


@dataclass(frozen=True)
class Outputs:
    model: TextCNN
    model_cfg: TextCNNConfig
    logits: np.ndarray  # (N, K) on the training rows
    transfer_logits: np.ndarray  # (M, K) on the transfer set's rows
    metrics: dict[str, float]


def run(params: Params, inputs: Inputs, tracker: Tracker) -> Outputs:
    """Train the word-level CNN (the best of its validation passes; curves to ``tracker``), then score the training and
    transfer rows with it."""
    task = params.cnn_task()
    model, model_cfg, metrics = train_word_cnn(params.cnn, params.train, inputs.vectors, inputs.rows,
                                               validation(inputs.tok, inputs.val, task), tracker, inputs.num_labels)
    start = time.perf_counter()
    (sequences, labels), transfer = inputs.train, inputs.transfer
    logits = chunked_logits(model, sequences, "cnn logits", model_cfg.num_labels, batch_size=256)
    transfer_logits = chunked_logits(model, transfer, "cnn logits, transfer set", model_cfg.num_labels, batch_size=256)
    metrics.update({"rows": len(labels), "extra_rows": len(inputs.rows[1]) - len(labels), "transfer_rows": len(transfer),
                    "score_seconds": time.perf_counter() - start, "skipped": False,
                    "train_accuracy": classification_metrics(labels, logits)["accuracy"]})
    return Outputs(model, model_cfg, logits, transfer_logits, metrics)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--pretrained", type=Path, default=Path("models/pretrain/model.safetensors"))
    parser.add_argument("--transfer", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--out", type=Path, default=Path("models/cnn"),
                        help="folder for model.safetensors, train.npz and transfer.npz")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/cnn.json"))
    args = parser.parse_args(argv)
    from pipeline.stages.common import finish_stage  # mlflow only where a stage logs
    from pipeline.tracking import stage_run

    params: Params = load_params()
    task = params.cnn_task()  # cnn.max_length / stride: its own windows
    data = prepared(args.data)
    train_path, val_path = split_path(args.data, "train"), split_path(args.data, "val")
    inputs = [train_path, val_path, args.transfer, args.tokenizer, args.pretrained]
    if data.intermediate is not None:
        inputs.append(split_path(args.data, "train", intermediate=True))
    with stage_run("cnn", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        train_df = load_split(args.data, "train")
        sequences, labels = encode_train(tok, train_df, task)
        transfer, transfer_labels = encode_train(tok, load_transfer_split(args.transfer), task)
        files = {"train": args.out / "train.npz", "transfer": args.out / "transfer.npz"}
        if params.soft_targets.shares.word_cnn == 0:  # not a source: nothing is trained, the files hold no columns
            (args.out / "model.safetensors").unlink(missing_ok=True)
            finish_stage(tracker, not_a_source(files["train"], files["transfer"], labels, transfer_labels), args.metrics)
            return
        check_tokenizer(args.pretrained, tok, args.tokenizer)
        encoder, _, _ = load_model(args.pretrained)
        tracker.log_dataset(train_df, train_path.stem, train_path, context="training")
        rows, _ = with_extra(tok, args.data, task, (sequences, labels))
        outputs = run(params, Inputs(tok, encoder.backbone.embeddings.tokens.weight.detach().clone(), rows,
                                     (sequences, labels), transfer, load_split(args.data, "val"), data.num_labels), tracker)
        save_logits(files["train"], outputs.logits, labels)
        save_logits(files["transfer"], outputs.transfer_logits, transfer_labels)
        model_path = save_textcnn(outputs.model, outputs.model_cfg, args.out / "model.safetensors", vocabulary_digest(tok),
                                  reads=reads(task, data.labels))
        finish_stage(tracker, outputs.metrics, args.metrics, {model_path: "checkpoint"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
