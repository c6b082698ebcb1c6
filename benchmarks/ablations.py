"""Ablations: each technique on vs off, same seeds, accuracy on the test split of record, one table.

Two blocks, each with its own reference row:

* fine-tuning techniques (LLRD, gradual unfreezing, FGM, PGD, pooling, no pretraining): every
  variant fine-tunes the same pretrained encoder (``--encoder``, default the pipeline's
  ``models/pretrain``) with the profile's ``finetune`` section plus the variant's overrides;
* architecture (pre- vs post-norm, position type): every variant pretrains its own encoder
  for the same ``--arch-steps`` steps on the same sequences and seeds, then fine-tunes it with
  the profile's settings.

Runs the stages' own functions (no DVC, no MLflow). Writes benchmarks/results/ablations.json.

    python benchmarks/ablations.py [--only finetune|arch|VARIANT,...] [--arch-steps 600] [-S finetune.epochs=1]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import torch
from common import ROOT, TaskData, add_params_args, finetune_and_score, load_with_overrides, parse_overrides

from minibert.checkpoint import load_model
from minibert.config import ModelConfig
from minibert.heads import POOLING
from minibert.layers import NORM_STYLES
from minibert.positional import POSITIONS
from minibert.tokenizer import load_tokenizer
from minibert.trainer import RecordingTracker
from pipeline import pretraining
from pipeline.io import read_table
from pipeline.params import FinetuneParams, Params

# name -> params overrides ("section.key": value)
FINETUNE_VARIANTS: dict[str, dict] = {
    "reference": {},
    "no_pretraining": {},  # random init: teacher.build(..., None, num_labels) (finetune.from_pretrained left params.yaml)
    "llrd_0.8": {"finetune.llrd": 0.8},
    "gradual_unfreezing": {"finetune.unfreeze_every": 300},
    "fgm": {"finetune.adversarial": "fgm"},  # epsilon: the profile's finetune section; PGD's alpha, steps: ClassifierLoop's
    "pgd": {"finetune.adversarial": "pgd"},
}
RANDOM_INIT = {"no_pretraining"}  # variants fine-tuned from random weights instead of the encoder


def finetune_variants(cfg: FinetuneParams) -> dict[str, dict]:
    """FINETUNE_VARIANTS and one row per pooling other than the profile's.

    No transfer-phase variants (no_transfer, transfer_<task>): the intermediate task is named by the dataset's
    description (datasets/<name>.yaml), not by a params key an override could flip (``task.intermediate`` is gone)."""
    return {**FINETUNE_VARIANTS, **{f"{p}_pooling": {"finetune.pooling": p} for p in POOLING if p != cfg.pooling}}


def arch_variants(model_cfg: ModelConfig) -> dict[str, dict]:
    """name -> model overrides: the profile's architecture, the other norm style, the other positions."""
    variants: dict[str, dict] = {"arch_reference": {}}
    variants.update({f"{style}_norm": {"norm_style": style} for style in NORM_STYLES if style != model_cfg.norm_style})
    variants.update({f"{pos}_positions": {"position": pos} for pos in POSITIONS if pos != model_cfg.position})
    return variants


ParamsFor = Callable[[dict[str, Any]], Params]  # {"section.key": value} -> validated params with them


def finetune_block(params_for: ParamsFor, names: list[str], encoder: Path, tok, data: TaskData) -> list[dict]:
    rows = []
    reference = params_for({})
    variants = finetune_variants(reference.finetune)
    for name in names:
        params = params_for(variants[name])
        mlm, model_cfg, _ = load_model(encoder)  # afresh: every variant starts from the same weights
        if model_cfg.vocab_size != tok.get_vocab_size():
            raise SystemExit(f"error: {encoder} has vocabulary {model_cfg.vocab_size}, the tokenizer "
                             f"{tok.get_vocab_size()}; pass the encoder pretrained with this tokenizer")
        start = time.perf_counter()
        scores = finetune_and_score(params, model_cfg, None if name in RANDOM_INIT else mlm.backbone, data)
        rows.append({"block": "finetune", "variant": name, "overrides": variants[name],
                     **scores, "seconds": time.perf_counter() - start})
        print(json.dumps(rows[-1], default=str), flush=True)
    return rows


def arch_block(params_for: ParamsFor, names: list[str], steps: int, tok, data: TaskData, corpus: list[str]) -> list[dict]:
    rows = []
    variants = arch_variants(params_for({}).model_config(tok.get_vocab_size()))
    for name in names:
        params = params_for({"pretrain.max_steps": steps, "pretrain.time_budget_min": None,
                             **{f"model.{key}": value for key, value in variants[name].items()}})
        model_cfg = params.model_config(tok.get_vocab_size())
        start = time.perf_counter()
        mlm, pre_metrics = pretraining.run(params.pretrain, params.train, model_cfg, tok, corpus, RecordingTracker())
        scores = finetune_and_score(params, model_cfg, mlm.backbone, data)
        rows.append({"block": "arch", "variant": name, "overrides": variants[name],
                     "mlm_accuracy": pre_metrics["mlm_accuracy"], "pretrain_seconds": pre_metrics["train_seconds"],
                     **scores, "seconds": time.perf_counter() - start})
        print(json.dumps(rows[-1], default=str), flush=True)
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"\n{'block':<10}{'variant':<22}{'test acc':>9}{'vs ref':>8}{'val acc':>9}{'MLM acc':>9}{'seconds':>9}")
    for block in ("finetune", "arch"):
        mine = [r for r in rows if r["block"] == block]
        if not mine:
            continue
        ref = mine[0]["test_accuracy"]
        for r in mine:
            mlm = f"{100 * r['mlm_accuracy']:.1f}" if "mlm_accuracy" in r else "-"
            print(f"{block:<10}{r['variant']:<22}{100 * r['test_accuracy']:>9.2f}{100 * (r['test_accuracy'] - ref):>+8.2f}"
                  f"{100 * r['val_accuracy']:>9.2f}{mlm:>9}{r['seconds']:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--encoder", type=Path, default=ROOT / "models" / "pretrain" / "model.safetensors")
    parser.add_argument("--only", default="finetune,arch", help="finetune, arch, or variant names, comma-separated")
    parser.add_argument("--arch-steps", type=int, default=600, help="pretraining steps for each architecture variant")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ablations.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = parse_overrides(args.overrides)

    def params_for(variant: dict[str, Any]) -> Params:
        return load_with_overrides(args.params, {**base, **variant}, args.profile)

    params = params_for({})
    tok = load_tokenizer(args.tokenizer)
    wanted = args.only.split(",")
    arch_names = list(arch_variants(params.model_config(tok.get_vocab_size())))
    ft_names = list(finetune_variants(params.finetune))
    ft = [n for n in ft_names if "finetune" in wanted or n in wanted]
    arch = [n for n in arch_names if "arch" in wanted or n in wanted]
    unknown = set(wanted) - {"finetune", "arch"} - set(ft_names) - set(arch_names)
    if unknown:
        raise SystemExit(f"error: unknown variant(s) {sorted(unknown)}; choose from {['finetune', 'arch', *ft_names, *arch_names]}")
    data = TaskData(params, tok, args.data)
    rows = finetune_block(params_for, ft, args.encoder, tok, data) if ft else []
    if arch:
        corpus = read_table(args.data / "corpus.parquet", ["text"])["text"].tolist()
        rows += arch_block(params_for, arch, args.arch_steps, tok, data, corpus)
    print_table(rows)
    args.out.write_text(json.dumps({
        "date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores, {args.threads} threads",
        "command": "python benchmarks/ablations.py " + " ".join(sys.argv[1:]), "params": str(args.params),
        "overrides": args.overrides, "arch_steps": args.arch_steps, "train": dataclasses.asdict(params.train),
        "finetune": dataclasses.asdict(params.finetune),
        "rows": rows}, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
