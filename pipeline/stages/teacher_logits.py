"""teacher_logits: the fine-tuned teacher's logits on the distillation training set, computed once.

A stage of its own so that changing the student, the temperature or any other ``distill``
param reruns only the student's training, never the teacher's forward passes. Rows follow the
task's training split as ``encode_train`` cuts it; the labels ride along so ``distill`` can
check the file still matches the split it reads.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from minibert.checkpoint import check_tokenizer, load_model
from minibert.inference import predict_logits
from minibert.tokenizer import load_tokenizer
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.progress import progress
from pipeline.soft_targets import save_logits
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import encode_train
from pipeline.tracking import stage_run

CHUNK_ROWS = 4096


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--teacher", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/teacher_logits/train.npz"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/teacher_logits.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    task = params.task
    train_path = split_path(args.data, task, "train")
    with stage_run("teacher_logits", params, ["task"], [train_path, args.tokenizer, args.teacher]) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(args.teacher, tok, args.tokenizer)
        teacher, _, _ = load_model(args.teacher)
        sequences, labels = encode_train(tok, load_split(args.data, task, "train"), task)
        start = time.perf_counter()
        chunks = range(0, len(sequences), CHUNK_ROWS)  # a bar step a chunk; each chunk batched by length
        logits = np.concatenate([predict_logits(teacher.eval(), sequences[i : i + CHUNK_ROWS], batch_size=128)
                                 for i in progress(chunks, "teacher logits", unit="chunk")])  # (N, L)
        seconds = time.perf_counter() - start
        save_logits(args.out, logits, labels)
        metrics = {"rows": len(labels), "seconds": seconds,
                   "teacher_train_accuracy": classification_metrics(labels, logits)["accuracy"]}
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
