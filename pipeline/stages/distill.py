"""distill: train the small student on the soft targets (Hinton et al. 2015 KD loss), the model that ships.

What the student learns comes through one seam: the ``soft_targets`` stage's folder (the sources'
averaged probabilities on the training rows and on the transfer set's texts). Besides it the stage
reads the data, the tokenizer and the student's starting weights. With ``distill.student_kind:
word_cnn`` (the default recipe) the student is the ``cnn`` stage's word-level CNN trained on further
(as Tang et al. 2019 distil BERT into a small non-transformer), reading texts through that model's
own windows; with ``distill.soup`` above 1, that many such students of successive seeds are trained
and their weights averaged (``minibert.soup``). With ``transformer`` it is a minibert of
``distill.student`` shape started from the teacher's layers, with TinyBERT-style hidden-state and
attention terms when their weights are above 0. Either way the loss is
alpha * T^2 * KL(targets || student) + (1 - alpha) * CE on the labels (on the transfer set: the
targets' argmax), with the classifier loop's batching, schedule and best-on-validation selection
(``pipeline.distillation``). The student's file records the windows and label names it reads with.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tokenizers import Tokenizer
from torch import nn

from minibert.checkpoint import check_tokenizer, load_model, read_contract, save_model
from minibert.contract import Contract
from minibert.textcnn import save_textcnn
from minibert.tokenizer import load_tokenizer, vocabulary_digest
from minibert.trainer import RecordingTracker, Tracker
from pipeline.curves import write_curves
from pipeline.distillation import distill_transformer, run_soup, with_transfer
from pipeline.io import DataError
from pipeline.params import Params, load_params
from pipeline.scoring import validation
from pipeline.soft_targets import TARGETS, TRANSFER_TEXTS, UNLABELLED, SoftTargets, load_soft_targets
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import encode_train, reading
from pipeline.tracking import stage_run


@dataclass(frozen=True)
class Inputs:
    """What distill reads, loaded: the tokenizer, the training and validation splits, the soft_targets stage's targets
    (``folder``: its path, for messages), and the checkpoint the student starts from (``start``: the cnn stage's model
    or the teacher) with its contract, whose windows and labels the student reads with."""

    tok: Tokenizer
    train: pd.DataFrame
    val: pd.DataFrame
    targets: SoftTargets
    folder: Path
    start: Path
    contract: Contract


@dataclass(frozen=True)
class Outputs:
    student: nn.Module
    write: Callable[[Path], Path]  # the student's checkpoint with its config and contract, written to a path
    metrics: dict[str, float]


def run(params: Params, inputs: Inputs, tracker: Tracker, others_tracker: Tracker | None = None) -> Outputs:
    """Train the ``distill.student_kind`` student on the soft targets of the training rows and the transfer set
    (selected on validation; curves to ``tracker``, a soup's other members to ``others_tracker``). DataError when the
    targets do not match the rows in use (stale after a data or task change)."""
    cfg, tok, contract = params.distill, inputs.tok, inputs.contract
    task = reading(params.task, contract.windows)  # the student reads texts as the model it starts from
    targets, where = inputs.targets, inputs.folder / TARGETS
    sequences, labels = encode_train(tok, inputs.train, task)
    if not np.array_equal(targets.labels, labels):
        raise DataError(f"{where}: {len(targets.labels)} target rows do not match the {len(labels)} training rows in "
                        "use (stale after a data or task change); rerun `dvc repro soft_targets`")
    transfer, _ = encode_train(tok, pd.DataFrame({"text": targets.transfer_texts, "label": UNLABELLED}), task)
    if len(transfer) != len(targets.transfer):
        raise DataError(f"{where}: {len(targets.transfer)} transfer-set targets for {len(transfer)} rows cut as the "
                        "student reads them; rerun `dvc repro soft_targets`")
    rows, all_targets = with_transfer((sequences, labels), targets.train, transfer, targets.transfer)
    val = validation(tok, inputs.val, task)
    reads, digest = (contract.windows, contract.labels), vocabulary_digest(tok)
    if cfg.student_kind == "word_cnn":
        student, cnn_cfg, metrics = run_soup(cfg, params.train, inputs.start, rows, all_targets, val, tracker,
                                             bag_lr=params.cnn.bag_lr_scale, others_tracker=others_tracker)

        def write(path: Path) -> Path:
            return save_textcnn(student, cnn_cfg, path, digest, reads=reads)
    else:
        teacher, _, head_cfg = load_model(inputs.start)
        student_cfg = params.student_config(tok.get_vocab_size())
        student, metrics = distill_transformer(cfg, params.train, teacher, head_cfg, student_cfg, rows, all_targets, val,
                                               tracker)

        def write(path: Path) -> Path:
            return save_model(student, student_cfg, path, head_cfg, digest, reads=reads)
    metrics["soft_target_train_accuracy"] = float((targets.train.argmax(axis=1) == labels).mean())
    metrics["transfer_rows"] = len(transfer)
    return Outputs(student, write, metrics)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--soft-targets", type=Path, default=Path("models/soft_targets"),
                        help="the soft_targets stage's folder: what the student learns")
    parser.add_argument("--teacher", type=Path, default=Path("models/finetune/model.safetensors"),
                        help="a transformer student's starting layers")
    parser.add_argument("--cnn-model", type=Path, default=Path("models/cnn/model.safetensors"),
                        help="a word_cnn student's starting model")
    parser.add_argument("--out", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/distill.json"))
    parser.add_argument("--curves", type=Path, default=Path("plots/curves/distill.csv"),
                        help="training curves (DVC plot); the PNG goes beside it")
    args = parser.parse_args(argv)
    params: Params = load_params()
    start = args.cnn_model if params.distill.student_kind == "word_cnn" else args.teacher
    train_path, val_path = split_path(args.data, "train"), split_path(args.data, "val")
    with stage_run("distill", params, [train_path, val_path, args.soft_targets / TARGETS, args.tokenizer, start]) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(start, tok, args.tokenizer)
        train_df, val_df = load_split(args.data, "train"), load_split(args.data, "val")
        targets = load_soft_targets(args.soft_targets)
        tracker.log_dataset(train_df, train_path.stem, train_path, context="training")
        tracker.log_dataset(pd.DataFrame({"text": targets.transfer_texts}), "transfer_set", args.soft_targets / TRANSFER_TEXTS,
                            context="training", targets=None)
        recorder = RecordingTracker(tracker)
        outputs = run(params, Inputs(tok, train_df, val_df, targets, args.soft_targets, start, read_contract(start)),
                      recorder, others_tracker=tracker)
        outputs.write(args.out)
        curves = write_curves(recorder.history, args.curves, "distill", "distillation into the student")
        finish_stage(tracker, outputs.metrics, args.metrics, {args.out: "checkpoint", **dict.fromkeys(curves, "curves")})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
