"""evaluate: every variant on the task's test split of record (SST-2: GLUE dev): quality, size, speed.

Variants: ``baseline`` (TF-IDF + LR), ``teacher`` (fine-tuned, torch fp32), ``student``
(distilled, torch fp32), ``student_int8`` (torch dynamic int8), ``student_onnx`` (ONNX Runtime
fp32). Texts longer than ``task.max_length`` are read through sliding windows (IMDb).
Speed is measured end to end from raw text (tokenization included) on ``threads``
threads: p50 / p95 latency of single sentences, and throughput in sentences/s at
``batch_size``. Size is the artifact's file size. Written to metrics/evaluate.json (nested, so
``dvc metrics show`` lists every variant) and plots/evaluate.csv.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import torch

from minibert.checkpoint import load_model
from minibert.export import load_session, onnx_logits
from minibert.quantize import load_int8
from minibert.tokenizer import load_tokenizer
from pipeline.io import atomic_path, write_json
from pipeline.metrics import classification_metrics, percentiles_ms
from pipeline.params import EvaluateParams, Params, load_params
from pipeline.task import load_split, split_path, text_logits
from pipeline.tracking import stage_run

Predict = Callable[[list[str]], np.ndarray]  # texts -> (N, 2) scores


@dataclass(frozen=True)
class Variant:
    name: str
    predict: Predict
    path: Path


def measure(variant: Variant, texts: list[str], labels: np.ndarray, cfg: EvaluateParams) -> dict[str, float]:
    """Quality on all texts, then batch-1 latency and batched throughput, all from raw text."""
    scores = variant.predict(texts)
    result = classification_metrics(labels, scores)
    variant.predict(texts[: cfg.batch_size])  # warm-up (allocations, lazy init)
    single = []
    for text in texts[: cfg.latency_rows]:
        start = time.perf_counter()
        variant.predict([text])
        single.append(time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(0, len(texts), cfg.batch_size):
        variant.predict(texts[i : i + cfg.batch_size])
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in variant.path.parent.glob(variant.path.name + "*"))
    return {**result, **percentiles_ms(single), "throughput_per_s": len(texts) / seconds, "size_mb": size / 1e6}


def onnx_callable(session) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """An ONNX Runtime session behind the (ids, mask) -> logits signature the predictors take."""
    return lambda ids, mask: torch.from_numpy(onnx_logits(session, ids.numpy(), mask.numpy()))


def run(variants: list[Variant], test: pd.DataFrame, cfg: EvaluateParams) -> dict[str, dict[str, float]]:
    torch.set_num_threads(cfg.threads)
    texts, labels = test["text"].tolist(), test["label"].to_numpy()
    return {v.name: measure(v, texts, labels, cfg) for v in variants}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--baseline", type=Path, default=Path("models/baseline/model.joblib"))
    parser.add_argument("--teacher", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--int8", type=Path, default=Path("models/quantize/student_int8.pt"))
    parser.add_argument("--onnx", type=Path, default=Path("models/export/student.onnx"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/evaluate.json"))
    parser.add_argument("--plot", type=Path, default=Path("plots/evaluate.csv"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    cfg, task = params.evaluate, params.task
    test_path = split_path(args.data, task, "test")
    inputs = [test_path, args.tokenizer, args.baseline, args.teacher, args.student, args.int8, args.onnx]
    with stage_run("evaluate", params, ["task", "evaluate"], inputs) as tracker:
        test = load_split(args.data, task, "test")
        tracker.log_dataset(test, test_path.stem, test_path, context="evaluation")
        tok = load_tokenizer(args.tokenizer)
        baseline = joblib.load(args.baseline)
        teacher, _, _ = load_model(args.teacher)
        student, _, _ = load_model(args.student)
        int8 = load_int8(student, args.int8)  # the fp32 student is the skeleton; it stays unmodified
        session = load_session(args.onnx, threads=cfg.threads)
        variants = [
            Variant("baseline", lambda texts: baseline.predict_proba(texts), args.baseline),
            Variant("teacher", text_logits(teacher, tok, task, cfg.batch_size), args.teacher),
            Variant("student", text_logits(student, tok, task, cfg.batch_size), args.student),
            Variant("student_int8", text_logits(int8, tok, task, cfg.batch_size), args.int8),
            Variant("student_onnx", text_logits(onnx_callable(session), tok, task, cfg.batch_size), args.onnx),
        ]
        results = run(variants, test, cfg)
        write_json(results, args.metrics)
        table = pd.DataFrame([{"variant": k, **v} for k, v in results.items()])
        with atomic_path(args.plot) as tmp:
            table.to_csv(tmp, index=False)
        tracker.log_metrics({f"{name}.{key}": value for name, row in results.items() for key, value in row.items()})
        tracker.log_artifact(args.metrics)
        tracker.log_artifact(args.plot)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
