"""Does the validation split track the test split of record over a fine-tuning run, and does the
best-on-validation checkpoint (what ``finetune`` and ``distill`` keep) beat the last one there?

Fine-tunes the task's classifier from ``--pretrained`` (the task alone: no transfer phase) with the
params file's ``finetune`` and ``train`` sections; at every ``--eval-every`` steps scores the validation split
and the test split of record. Per seed: the two curves, their correlation, and test accuracy at
the best-validation evaluation and at the last. Appends one JSON line a seed to
benchmarks/results/val_vs_dev.jsonl (and prints a table).

    python benchmarks/val_vs_dev.py --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json \\
        --pretrained <run>/models/pretrain/model.safetensors --seeds 0 1 2 --eval-every 250
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from common import ROOT, TaskData, add_params_args, load_with_overrides, parse_overrides
from machine import describe

from minibert.checkpoint import load_model
from minibert.tokenizer import load_tokenizer
from minibert.trainer import NullTracker
from pipeline.classifier_loop import train_classifier
from pipeline.metrics import classification_metrics
from pipeline.params import Params
from pipeline.scoring import Validation
from pipeline.teacher import build, finetune_loop


def one_seed(args: argparse.Namespace, params: Params, data: TaskData, seed: int) -> dict:
    cfg, shared = params.finetune, dataclasses.replace(params.train, seed=seed, eval_every=args.eval_every)
    torch.manual_seed(seed)
    mlm, model_cfg, _ = load_model(args.pretrained)
    model = build(cfg, model_cfg, mlm.backbone, data.prepared.num_labels)
    (val_logits, val_labels, val_tokens), (test_logits, test_labels, _) = data.val, data.test
    curve: list[dict[str, float]] = []

    def both(m: torch.nn.Module) -> np.ndarray:  # the validation hook, scoring the test split beside it
        logits = val_logits(m)
        curve.append({"val": classification_metrics(val_labels, logits)["accuracy"],
                      "test": classification_metrics(test_labels, test_logits(m))["accuracy"]})
        return logits

    start = time.perf_counter()
    _, metrics = train_classifier(model, finetune_loop(cfg, shared), data.train, Validation(both, val_labels, val_tokens), NullTracker())
    best = int(np.argmax([c["val"] for c in curve]))  # the first maximum, as train_classifier keeps
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), **describe(), "task": params.data.dataset, "seed": seed,
        "overrides": args.overrides, "eval_every": args.eval_every, "steps": metrics["steps"],
        "seconds": round(time.perf_counter() - start, 1), "curve": curve, "best_index": best,
        "best_step": metrics["best_step"], "test_at_best_val": curve[best]["test"], "test_at_last": curve[-1]["test"],
        "val_test_correlation": float(np.corrcoef([c["val"] for c in curve], [c["test"] for c in curve])[0, 1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--pretrained", type=Path, default=ROOT / "models" / "pretrain" / "model.safetensors")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "val_vs_dev.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    data = TaskData(params, load_tokenizer(args.tokenizer), args.data, params.train.precision)  # encoded once
    print("| seed | val / test at each evaluation | best val at step | test there | test at the last | correlation |")
    print("|---|---|---|---|---|---|")
    for seed in args.seeds:
        row = one_seed(args, params, data, seed)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        points = " ".join(f"{c['val'] * 100:.1f}/{c['test'] * 100:.1f}" for c in row["curve"])
        print(f"| {seed} | {points} | {row['best_step']} | {row['test_at_best_val'] * 100:.2f} | "
              f"{row['test_at_last'] * 100:.2f} | {row['val_test_correlation']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
