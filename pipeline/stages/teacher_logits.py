"""teacher_logits: the fine-tuned teacher's logits on the distillation training set, computed once.

A stage of its own so that changing the student, the temperature or any other ``distill``
param reruns only the student's training, never the teacher's forward passes. Rows follow the
task's training split as ``encode_train`` cuts it; the labels ride along so ``distill`` can
check the file still matches the split it reads. With ``soft_targets.shares.teacher: 0`` the teacher is not a
source: nothing is scored and the files hold no columns. The transfer set's texts (stage ``transfer_set``)
are scored into a second file, their rows cut the same way, with label -1 (unlabelled). The
teacher runs in the precision it was fine-tuned in (``finetune.precision``): with ``auto`` that is
bf16 autocast where the CPU has it, 1.7x faster than fp32 in the pipeline (188 -> 109 s) and within about
1e-2 of its logits (``benchmarks/precision_speed.py``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from torch import nn

from minibert.checkpoint import check_tokenizer, load_model
from minibert.precision import resolve_precision
from minibert.tokenizer import load_tokenizer
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.scoring import teacher_logits
from pipeline.soft_targets import not_a_source, save_logits
from pipeline.splits import load_split, split_path
from pipeline.task import encode_train
from pipeline.transfer_texts import load_transfer_split


def run(precision: str, teacher: nn.Module, train: tuple[list[list[int]], np.ndarray],
        transfer: list[list[int]]) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """The teacher's logits on the training rows and on the transfer set's rows, in ``precision`` (``train.precision``
    as resolved on the teacher's device), and the metrics (seconds of each pass, its training accuracy)."""
    (sequences, labels), precision = train, resolve_precision(precision, next(teacher.parameters()).device)
    start = time.perf_counter()
    logits = teacher_logits(teacher, sequences, "teacher logits", precision)
    seconds = time.perf_counter() - start
    transfer_logits = teacher_logits(teacher, transfer, "teacher logits, transfer set", precision)
    metrics = {"rows": len(labels), "seconds": seconds, "transfer_rows": len(transfer),
               "transfer_seconds": time.perf_counter() - start - seconds,
               "teacher_train_accuracy": classification_metrics(labels, logits)["accuracy"],
               "bf16_autocast": precision == "bf16"}
    return logits, transfer_logits, metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--teacher", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/teacher_logits/train.npz"))
    parser.add_argument("--transfer", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--transfer-out", type=Path, default=Path("models/teacher_logits/transfer.npz"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/teacher_logits.json"))
    args = parser.parse_args(argv)
    from pipeline.stages.common import finish_stage  # mlflow only where a stage logs
    from pipeline.tracking import stage_run
    params: Params = load_params()
    task = params.task
    train_path = split_path(args.data, "train")
    inputs = [train_path, args.transfer, args.tokenizer, args.teacher]
    with stage_run("teacher_logits", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        sequences, labels = encode_train(tok, load_split(args.data, "train"), task)
        transfer, transfer_labels = encode_train(tok, load_transfer_split(args.transfer), task)
        if params.soft_targets.shares.teacher == 0:  # not a source: nothing is scored, the files hold no columns
            finish_stage(tracker, not_a_source(args.out, args.transfer_out, labels, transfer_labels), args.metrics)
            return
        check_tokenizer(args.teacher, tok, args.tokenizer)
        teacher, _, _ = load_model(args.teacher)
        logits, transfer_logits, metrics = run(params.train.precision, teacher, (sequences, labels), transfer)
        save_logits(args.out, logits, labels)
        save_logits(args.transfer_out, transfer_logits, transfer_labels)
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
