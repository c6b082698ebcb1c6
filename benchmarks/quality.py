"""Pretraining + fine-tuning quality at a CPU budget: what pretraining buys, measured.

Runs the pipeline's own stage functions (no DVC, no MLflow) on prepared data: MLM pretraining
with the profile's ``pretrain`` section, then fine-tuning from that encoder, then (with
``--scratch``) the same fine-tuning from random initialisation; scores the task's test split of
record (SST-2: GLUE dev; IMDb: test) through the task's sliding windows. Overrides use DVC's
``-S section.key=value`` syntax. Appends one JSON record per run to
benchmarks/results/quality.jsonl.

    python benchmarks/quality.py --tag bf16-prenorm -S pretrain.precision=bf16 --scratch
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import torch
from common import ROOT, TaskData, add_params_args, finetune_and_score, load_with_overrides, parse_overrides

from minibert.checkpoint import load_model, save_model
from minibert.tokenizer import load_tokenizer
from minibert.trainer import RecordingTracker
from pipeline.io import read_table
from pipeline.stages import pretrain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--scratch", action="store_true", help="also fine-tune from random initialisation")
    parser.add_argument("--no-pretrain", action="store_true", help="only the from-scratch fine-tuning")
    parser.add_argument("--save", type=Path, help="write the pretrained encoder here (safetensors)")
    parser.add_argument("--encoder", type=Path, help="fine-tune this saved encoder instead of pretraining one")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides))
    tok = load_tokenizer(args.tokenizer)
    model_cfg = params.model_config(tok.get_vocab_size())
    record: dict = {"tag": args.tag, "when": datetime.now(UTC).isoformat(timespec="seconds"),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, {args.threads} threads",
                    "params": str(args.params.relative_to(ROOT) if args.params.is_relative_to(ROOT) else args.params),
                    "overrides": args.overrides, "task": params.task.name}
    data = TaskData(params, tok, args.data)
    if args.encoder:
        mlm, model_cfg, _ = load_model(args.encoder)
        record["encoder"] = str(args.encoder)
    elif not args.no_pretrain:
        corpus = read_table(args.data / "corpus.parquet", ["text"])["text"].tolist()
        mlm, record["pretrain"] = pretrain.run(params.pretrain, model_cfg, tok, corpus, RecordingTracker())
        print(json.dumps({"pretrain": record["pretrain"]}), flush=True)
        if args.save:
            save_model(mlm, model_cfg, args.save)
    if args.encoder or not args.no_pretrain:
        record["finetune"] = finetune_and_score(params, model_cfg, mlm.backbone, data)
        print(json.dumps({"finetune": record["finetune"]}), flush=True)
    if args.scratch or args.no_pretrain:
        record["scratch"] = finetune_and_score(params, model_cfg, None, data)
        print(json.dumps({"scratch": record["scratch"]}), flush=True)
    out = ROOT / "benchmarks" / "results" / "quality.jsonl"
    with open(out, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
    for key in ("finetune", "scratch"):
        if key in record:
            print(f"{args.tag or 'run'} {key}: test accuracy {100 * record[key]['test_accuracy']:.2f} "
                  f"(val {100 * record[key]['val_accuracy']:.2f}, {record[key]['train_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
