"""Train a tiny classifier on word-salad reviews for a few steps, in one process or under
torchrun (then each rank takes its shard of every global batch): the DDP equivalence test runs
this both ways and compares the weights rank 0 writes. Each rank appends what it logged to
``<out>/log.rank<R>.jsonl``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ for conftest's toy data
from conftest import toy_texts  # noqa: E402

from minibert import ClassifierConfig, ModelConfig, build_classifier  # noqa: E402
from minibert.batching import EpochStream, pad_batch  # noqa: E402
from minibert.distributed import World  # noqa: E402
from minibert.tokenizer import encode, load_tokenizer  # noqa: E402
from minibert.train_config import LoopConfig, OptimConfig  # noqa: E402
from minibert.trainer import Checkpointer, Hooks, fit  # noqa: E402


class FileTracker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True, help="one file for every run: WordPiece training is not deterministic")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--budget", type=float, help="seconds; the schedule runs on the budget clock, and each rank writes its weights")
    parser.add_argument("--crash-at", type=int, help="rank 0 dies (os._exit) before this step: a killed run")
    args = parser.parse_args()
    world = World.from_env()
    world.init()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(args.tokenizer)
    rng = np.random.default_rng(0)
    texts = toy_texts(rng, rng.integers(3, 20, size=96))
    labels = np.array([int("dull" in t or "bored" in t) for t in texts])
    sequences = encode(tok, texts, 32)
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64, hidden_dropout=0.0,
                             attention_dropout=0.0)  # dropout draws differ per process; the equivalence needs none
    model = build_classifier(cfg, ClassifierConfig(pooling="mean", dropout=0.0))
    world.check_batch(args.batch_size, "--batch-size")

    def make(index: np.ndarray, _: torch.Generator):
        ids, mask = pad_batch([sequences[i] for i in index], pad_id=0)
        return ids, mask, torch.as_tensor(labels[index])

    def crash(step: int) -> None:
        if world.main and step == args.crash_at:
            os._exit(9)

    budget = args.budget
    if budget and world.rank == 1:  # rank 1's own clock runs 1.5x fast, and its own budget is twice rank 0's
        real_clock = time.perf_counter
        time.perf_counter = lambda: 1.5 * real_clock()
        budget *= 2
    stream = EpochStream([len(s) for s in sequences], args.batch_size, 0, make, shard=(world.rank, world.size))

    def evaluate(_: torch.nn.Module) -> dict[str, float]:  # rank 1's takes 4x rank 0's (6x on its fast clock)
        time.sleep(0.05 * (1 + 3 * world.rank))
        return {"score": 0.0}

    result = fit(model, stream, lambda m, b: (F.cross_entropy(m(b[0], b[1]), b[2]), int(b[1].sum())),
                 OptimConfig(lr=1e-3, warmup_ratio=0.1, schedule_clock="budget" if args.budget else "steps",
                             betas=(0.9, 0.8) if args.budget else (0.9, 0.98)),  # budget: a 10-step warmup floor (2 / (1 - beta2)); a loaded CI host runs ~20 steps
                 LoopConfig(max_steps=args.steps, log_every=1, time_budget_s=budget, eval_every=10 if budget else 0,
                 accumulate=args.accumulate, checkpoint_every=4 if args.checkpoint else 0),
                 FileTracker(args.out / f"log.rank{world.rank}.jsonl"),
                 Hooks(before_step=crash, evaluate=evaluate if budget else None),
                 checkpointer=Checkpointer(args.checkpoint, "ddp-test") if args.checkpoint else None, world=world)
    if args.budget:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.out / f"model.rank{world.rank}.safetensors"))
    if world.main:
        (args.out / "resumed_from.txt").write_text(str(result.resumed_from))
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.out / "model.safetensors"))
        (args.out / "result.json").write_text(json.dumps({"steps": result.steps, "world": world.size}))


if __name__ == "__main__":
    main()
