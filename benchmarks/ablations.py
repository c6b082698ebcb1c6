"""Fine-tuning ablations: each technique on vs off, same seeds, same pretrained encoder.

Runs the finetune stage's own functions (no DVC, no MLflow) on the task's prepared splits from
the pretrained checkpoint the pipeline wrote, once per variant, and reports accuracy on the
test split of record (SST-2: GLUE dev) and on validation in one table. Variants are overrides of
params.yaml's ``finetune`` section. Writes benchmarks/results/ablations.json.

    python benchmarks/ablations.py [--only baseline,llrd] [--epochs 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from datetime import date
from pathlib import Path

import torch

from minibert.checkpoint import load_model
from minibert.tokenizer import load_tokenizer
from minibert.trainer import NullTracker
from pipeline.metrics import classification_metrics
from pipeline.params import load_params
from pipeline.stages.finetune import build, train_classifier, validation
from pipeline.task import encode_train, load_split

ROOT = Path(__file__).resolve().parent.parent

# name -> overrides of the finetune section (flat keys; "optim.lr" reaches into the optimizer)
VARIANTS: dict[str, dict] = {
    "baseline": {},
    "no_pretraining": {"from_pretrained": False},
    "llrd_0.8": {"llrd": 0.8},
    "gradual_unfreezing": {"unfreeze_every": 300},
    "fgm": {"adversarial": "fgm", "adv_epsilon": 1.0},
    "pgd": {"adversarial": "pgd", "adv_epsilon": 1.0, "pgd_alpha": 0.3, "pgd_steps": 3},
    "mean_pooling": {"pooling": "mean"},
    "max_pooling": {"pooling": "max"},
}


def with_overrides(cfg, overrides: dict):
    optim = {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith("optim.")}
    plain = {k: v for k, v in overrides.items() if not k.startswith("optim.")}
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, **optim) if optim else cfg.optim, **plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated variant names")
    parser.add_argument("--epochs", type=float)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_params(ROOT / "params.yaml")
    tok = load_tokenizer(ROOT / "models" / "tokenizer" / "tokenizer.json")
    data = ROOT / "data" / "prepared"
    base = params.finetune if args.epochs is None else dataclasses.replace(params.finetune, epochs=args.epochs)
    task = params.task
    train = encode_train(tok, load_split(data, task, "train"), task)
    val = validation(tok, load_split(data, task, "val"), task)
    test = validation(tok, load_split(data, task, "test"), task)
    names = args.only.split(",") if args.only else list(VARIANTS)
    rows = []
    for name in names:
        cfg = with_overrides(base, VARIANTS[name])
        torch.manual_seed(cfg.seed)
        mlm, model_cfg, _ = load_model(ROOT / "models" / "pretrain" / "model.safetensors")
        if not cfg.from_pretrained:
            model_cfg = params.model_config(tok.get_vocab_size())
        model = build(cfg, model_cfg, mlm.backbone if cfg.from_pretrained else None)
        start = time.perf_counter()
        model, metrics = train_classifier(model, cfg, train, val, NullTracker(), name=name)
        dev_metrics = classification_metrics(test[1], test[0](model))
        rows.append({"variant": name, "overrides": VARIANTS[name], "dev_accuracy": dev_metrics["accuracy"],
                     "dev_f1": dev_metrics["f1"], "val_accuracy": metrics["val_accuracy"],
                     "seconds": time.perf_counter() - start, "steps": metrics["steps"]})
        print(json.dumps(rows[-1]), flush=True)
    ref = next((r for r in rows if r["variant"] == "baseline"), rows[0])
    print(f"\n{'variant':<20}{'dev acc':>9}{'vs base':>9}{'val acc':>9}{'seconds':>9}")
    for r in rows:
        print(f"{r['variant']:<20}{100 * r['dev_accuracy']:>9.2f}{100 * (r['dev_accuracy'] - ref['dev_accuracy']):>+9.2f}"
              f"{100 * r['val_accuracy']:>9.2f}{r['seconds']:>9.0f}")
    out = ROOT / "benchmarks" / "results" / "ablations.json"
    out.write_text(json.dumps({"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                               "finetune": dataclasses.asdict(base), "rows": rows}, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
