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
from pathlib import Path

import numpy as np
import pandas as pd

from minibert.checkpoint import check_tokenizer, load_model, read_contract, save_model
from minibert.textcnn import save_textcnn
from minibert.tokenizer import load_tokenizer, vocabulary_digest
from minibert.trainer import RecordingTracker
from pipeline.curves import write_curves
from pipeline.distillation import distill_transformer, run_soup, with_transfer
from pipeline.io import DataError
from pipeline.params import Params, load_params
from pipeline.scoring import validation
from pipeline.soft_targets import TARGETS, TRANSFER_TEXTS, UNLABELLED, load_soft_targets
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import encode_train, reading
from pipeline.tracking import stage_run


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
    cfg = params.distill
    start = args.cnn_model if cfg.student_kind == "word_cnn" else args.teacher
    contract = read_contract(start)  # the student reads texts as the model it starts from
    task = reading(params.task, contract.windows)
    train_path, val_path = split_path(args.data, "train"), split_path(args.data, "val")
    inputs = [train_path, val_path, args.soft_targets / TARGETS, args.tokenizer, start]
    with stage_run("distill", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(start, tok, args.tokenizer)
        train_df, val_df = load_split(args.data, "train"), load_split(args.data, "val")
        tracker.log_dataset(train_df, train_path.stem, train_path, context="training")
        sequences, labels = encode_train(tok, train_df, task)
        targets = load_soft_targets(args.soft_targets)
        if not np.array_equal(targets.labels, labels):
            raise DataError(f"{args.soft_targets / TARGETS}: {len(targets.labels)} target rows do not match the "
                            f"{len(labels)} training rows in use (stale after a data or task change); rerun `dvc repro soft_targets`")
        transfer_df = pd.DataFrame({"text": targets.transfer_texts, "label": UNLABELLED})
        tracker.log_dataset(transfer_df[["text"]], "transfer_set", args.soft_targets / TRANSFER_TEXTS, context="training",
                            targets=None)
        transfer, _ = encode_train(tok, transfer_df, task)
        if len(transfer) != len(targets.transfer):
            raise DataError(f"{args.soft_targets / TARGETS}: {len(targets.transfer)} transfer-set targets for {len(transfer)} "
                            "rows cut as the student reads them; rerun `dvc repro soft_targets`")
        rows, all_targets = with_transfer((sequences, labels), targets.train, transfer, targets.transfer)
        recorder = RecordingTracker(tracker)
        val = validation(tok, val_df, task)
        if cfg.student_kind == "word_cnn":
            student, cnn_cfg, metrics = run_soup(cfg, params.train, args.cnn_model, rows, all_targets, val, recorder,
                                                 bag_lr=params.cnn.bag_lr_scale, others_tracker=tracker)
            save_textcnn(student, cnn_cfg, args.out, vocabulary_digest(tok), reads=(contract.windows, contract.labels))
        else:
            teacher, _, head_cfg = load_model(args.teacher)
            student_cfg = params.student_config(tok.get_vocab_size())
            student, metrics = distill_transformer(cfg, params.train, teacher, head_cfg, student_cfg, rows, all_targets, val, recorder)
            save_model(student, student_cfg, args.out, head_cfg, vocabulary_digest(tok),
                       reads=(contract.windows, contract.labels))
        metrics["soft_target_train_accuracy"] = float((targets.train.argmax(axis=1) == labels).mean())
        metrics["transfer_rows"] = len(transfer)
        curves = write_curves(recorder.history, args.curves, "distill", "distillation into the student")
        finish_stage(tracker, metrics, args.metrics, {args.out: "checkpoint", **dict.fromkeys(curves, "curves")})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
