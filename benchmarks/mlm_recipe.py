"""Pretraining recipes at the profile's budget: the held-out MLM curve against minutes, one recipe a run.

Runs the pipeline's own ``pipeline.pretraining.run`` (the ``pretrain`` stage without MLflow or files) on a prepared
corpus with the profile's ``pretrain`` / ``train`` / ``model`` sections and ``-S section.key=value`` overrides, and
prints the fixed held-out measurement (``pipeline.pretraining``: masked-token accuracy and loss on held-out
documents, 15 % masked, a fixed seed) at every evaluation with the training seconds it was reached at. One line a
run is appended to ``--out`` (JSON lines), tagged, with the host. Run one recipe at a time on a quiet machine: the
time budget decides how many steps it gets.

    python benchmarks/mlm_recipe.py TAG --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json \\
        [-S pretrain.batch_size=16 ...]
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import pandas as pd
import torch
from common import ROOT, add_params_args, load_with_overrides, parse_overrides
from machine import describe

from minibert.tokenizer import load_tokenizer
from minibert.trainer import RecordingTracker
from pipeline import pretraining
from pipeline.transfer_texts import CORPUS


def curve(history: RecordingTracker, metrics: dict) -> list[dict[str, float]]:
    """(step, training seconds, held-out accuracy, loss) at each evaluation; the seconds of the log record at that
    step (``fit`` logs them every ``log_every`` steps; the evaluation steps are multiples of it in the profiles), and
    the run's for the final one."""
    seconds = {**dict(history.series("elapsed_s")), metrics["steps"]: metrics["train_seconds"]}
    loss = dict(history.series("eval_mlm_loss"))
    return [{"step": step, "seconds": seconds.get(step), "mlm_accuracy": acc, "mlm_loss": loss[step]}
            for step, acc in history.series("eval_mlm_accuracy")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag", help="the record's name")
    add_params_args(parser)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mlm_recipe.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    tok = load_tokenizer(args.tokenizer)
    texts = pd.read_parquet(args.data / CORPUS)["text"].tolist()
    history = RecordingTracker()
    _, metrics = pretraining.run(params.pretrain, params.train, params.model_config(tok.get_vocab_size()), tok, texts,
                                 history)
    points = curve(history, metrics)
    print(f"{args.tag}: {metrics['steps']} steps of {params.pretrain.batch_size} x {params.pretrain.max_length} in "
          f"{metrics['train_seconds']:.0f} s, {metrics['approx_tokens_seen'] / 1e6:.2f} M tokens")
    print("| step | minutes | held-out MLM accuracy | loss |\n|---|---|---|---|")
    for p in points:
        minutes = "" if p["seconds"] is None else f"{p['seconds'] / 60:.2f}"
        print(f"| {p['step']} | {minutes} | {p['mlm_accuracy']:.2%} | {p['mlm_loss']:.3f} |")
    record = {"tag": args.tag, "date": date.today().isoformat(), **describe(), "threads": args.threads,
              "overrides": args.overrides, "profile": None if args.profile is None else str(args.profile),
              "curve": points, **{k: metrics[k] for k in ("mlm_accuracy", "mlm_loss", "steps", "train_seconds",
                                                          "approx_tokens_seen", "bf16_autocast", "eval_masked_tokens")}}
    with args.out.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
