"""The MLM step against this host's limit: matmul ceiling, our step's tokens/s and FLOP/s, where the rest goes.

In one run, on the host at hand, at the profile's pretraining shape (``pretrain.batch_size`` x ``pretrain.max_length``,
the ``model`` section) and ``--threads`` threads:

1. **The practical ceiling**: torch's own ``mm`` at the step's GEMM shapes (tokens x d x 3d, x d x d, x d x I and
   x I x d, with tokens = batch x length, and each one's input- and weight-gradient GEMMs), fp32 and bf16, median of
   ``--reps``; the ceiling of a precision is the FLOP-weighted one over those shapes (their FLOPs summed over their
   times summed).
2. **Our step through the pipeline's own loop**, old and new path side by side: ``minibert.trainer.fit`` on
   ``pipeline.pretraining.batch_stream`` (real corpus documents, fresh masking) with the path's step function, fp32
   and bf16 autocast. *old*: one document piece a row, length-bucketed and padded, 64 a step, the model's dropout
   (0.1) and attention core (SDPA), as the default pretraining ran before packing; *new*: the profile's ``pretrain`` section
   (``packing``: rows of exactly ``max_length``, no attention mask; ``dropout``; ``attention``). Tokens/s in real (non-pad) tokens, the median over ``--steps``
   steps after ``--warmup``. FLOPs a token: ``benchmarks/flops.py`` (6N + 12LTd, the sparse head at the masked
   fraction), at the path's mean real length; achieved FLOP/s and its fraction of the same precision's ceiling.
3. **transformers.BertForMaskedLM** (SDPA, fp32, its dense head) on the new path's batches, same threads, a plain
   loop with the same AdamW: tokens/s.
4. **Where the new step goes**: ``torch.profiler`` over ``--profile-steps`` of it (model and optimizer on pre-built
   batches) at the profile's precision, self CPU time by category (matmul, attention: SDPA's kernels or its math
   path's bmm and softmax, dropout, dtype casts, other elementwise, optimizer); and the data path (batching and
   masking) timed alone, as a share of the step.

Prints the tables and writes benchmarks/results/mlm_ceiling.json (``--out``).

    python benchmarks/mlm_ceiling.py --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json

What an AVX2-only CPU gets, emulated on a bigger one by capping ATen's and oneDNN's instruction set (bf16 is
emulated there, and ``precision: auto`` takes fp32 on such a CPU):

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/mlm_ceiling.py ... --precisions fp32 \
        --out benchmarks/results/mlm_ceiling_avx2.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import time
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from common import ROOT, add_params_args, load_with_overrides, parse_overrides, step_gaps
from flops import mlm_train_flops_per_token
from machine import describe

from minibert import build_mlm
from minibert.precision import resolve_precision
from minibert.tokenizer import load_tokenizer
from minibert.train_config import LoopConfig
from pipeline import pretraining
from pipeline.transfer_texts import CORPUS

# self-CPU-time categories of the profile, by aten op name (first match wins); the rest is "other elementwise"
CATEGORIES = (
    ("optimizer", re.compile(r"adam|_foreach_|Optimizer|lerp|addcdiv|addcmul|sqrt|_fused")),
    # SDPA's fused kernels, or its math path's batched matmuls and softmax (CPU SDPA with attention dropout takes it)
    ("attention", re.compile(r"scaled_dot_product|flash_attention|efficient_attention|aten::(bmm|baddbmm|_softmax|_softmax_backward_data)$")),
    ("matmul", re.compile(r"aten::(mm|addmm|matmul|linear)$|mkldnn|onednn")),
    ("dropout", re.compile(r"dropout|bernoulli")),
    ("dtype casts", re.compile(r"aten::(copy_|_to_copy|to)$")),
)


def gemm_shapes(cfg, tokens: int) -> list[tuple[str, int, int, int, int]]:
    """(name, M, K, N, count a layer) of the encoder's GEMMs at ``tokens`` rows: each linear layer's forward
    (tokens x in x out), its input gradient (tokens x out x in) and its weight gradient (in x tokens x out), which
    a training step runs once each."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    shapes = []
    for name, k, n in (("qkv", d, 3 * d), ("out", d, d), ("up", d, i), ("down", i, d)):
        shapes += [(name, tokens, k, n, 1), (f"{name} dX", tokens, n, k, 1), (f"{name} dW", k, tokens, n, 1)]
    return shapes


def matmul_ceiling(shapes, dtype: torch.dtype, reps: int) -> dict:
    rows, flops, seconds = [], 0.0, 0.0
    for name, m, k, n, count in shapes:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        for _ in range(3):
            torch.mm(a, b)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        rows.append({"gemm": f"{name} {m}x{k}x{n}", "tflops": 2 * m * k * n / t / 1e12})
        flops += count * 2 * m * k * n
        seconds += count * t
    return {"shapes": rows, "ceiling_tflops": flops / seconds / 1e12}


def real_tokens(batches) -> list[int]:
    return [int(batch[1].sum()) for batch in batches]


@dataclasses.dataclass(frozen=True)
class Path_:
    """A pretraining path: its rows (sequences, or packed rows), the section it streams them with, its model
    (dropout) and its step function."""

    name: str
    rows: list | np.ndarray
    cfg: object  # PretrainParams
    model_cfg: object  # ModelConfig
    step: object  # (model, batch) -> (loss, tokens)


OLD_BATCH = 64  # sequences a step of the old path (the default before packing)


def paths(params, model_cfg, encoded: list[list[int]], tok, steps: int) -> dict[str, Path_]:
    """old: padded document pieces, 64 a step, the model's dropout and attention core, as the default section ran
    before packing (its other keys the profile's); new: the profile's pretrain section."""
    cfg, seed = params.pretrain, params.train.seed
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    old_cfg = dataclasses.replace(cfg, packing=False, dropout=None, attention=None, batch_size=OLD_BATCH)
    needed = steps * max(OLD_BATCH, cfg.batch_size)
    old = pretraining.training_rows(encoded, old_cfg, seed + 1, cls_id, sep_id, needed)
    new_model = pretraining.training_config(cfg, model_cfg)
    new = pretraining.training_rows(encoded, cfg, seed + 1, cls_id, sep_id, needed)
    return {"old": Path_("old", old, old_cfg, model_cfg, pretraining.mlm_step),
            "new": Path_("new", new, cfg, new_model, pretraining.training_step(cfg))}


def our_step(params, path: Path_, precision: str, warmup: int, steps: int) -> dict:
    cfg, shared = path.cfg, params.train
    torch.manual_seed(shared.seed)
    model = build_mlm(path.model_cfg)
    stream = pretraining.batch_stream(path.rows, cfg, path.model_cfg.vocab_size, shared.seed)
    loop = LoopConfig(max_steps=warmup + steps + 1, precision=precision)
    gaps = step_gaps(model, stream, path.step, cfg.optim(shared), loop)
    # the same stream again for the tokens each step saw: gap i ends at step i + 2 (batch index i + 1)
    replay = pretraining.batch_stream(path.rows, cfg, path.model_cfg.vocab_size, shared.seed)
    tokens = real_tokens([b for b, _ in zip(replay, range(warmup + steps + 1))])
    per_step = [tokens[i + 1] / gaps[i] for i in range(warmup, len(gaps))]
    return {"path": path.name, "precision": precision, "tokens_per_s": float(np.median(per_step)), "steps_timed": len(per_step),
            "mean_real_tokens_a_step": float(np.mean(tokens)), "mean_length": float(np.mean(tokens)) / cfg.batch_size}


def hf_step(model_cfg, batches, lr: float, warmup: int) -> dict:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=model_cfg.vocab_size, hidden_size=model_cfg.hidden_size,
                                       num_hidden_layers=model_cfg.num_layers, num_attention_heads=model_cfg.num_heads,
                                       intermediate_size=model_cfg.intermediate_size, attn_implementation="sdpa")).train()
    optim = torch.optim.AdamW(model.parameters(), lr=lr)
    per_step = []
    for i, (ids, mask, positions, labels) in enumerate(batches):
        full = torch.full((ids.numel(),), -100, dtype=torch.long)
        full[positions] = labels
        start = time.perf_counter()
        loss = model(input_ids=ids, attention_mask=mask, labels=full.view_as(ids)).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        if i >= warmup:
            per_step.append(int(mask.sum()) / (time.perf_counter() - start))
    return {"tokens_per_s": float(np.median(per_step)), "steps_timed": len(per_step)}


def profile_step(params, path: Path_, batches, precision: str) -> tuple[dict, list]:
    """Self CPU time by category over ``batches`` (after two untimed steps), model forward, backward and AdamW; and the
    15 costliest ops (name, category, share)."""
    torch.manual_seed(0)
    model = build_mlm(path.model_cfg).train()
    optim = torch.optim.AdamW(model.parameters(), lr=params.pretrain.lr)

    def step(batch) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss, _ = path.step(model, batch)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()

    for batch in batches[:2]:
        step(batch)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for batch in batches[2:]:
            step(batch)
    totals: dict[str, float] = {}
    ops = []
    for event in prof.key_averages():
        if not event.key.startswith("aten::") and not CATEGORIES[0][1].search(event.key):
            continue  # record_function ranges and autograd nodes: their time is their ops'
        category = next((name for name, pattern in CATEGORIES if pattern.search(event.key)), "other elementwise")
        totals[category] = totals.get(category, 0.0) + event.self_cpu_time_total
        ops.append((event.key, category, event.self_cpu_time_total))
    whole = sum(totals.values())
    top = [{"op": key, "category": category, "share": t / whole} for key, category, t in sorted(ops, key=lambda o: -o[2])[:15]]
    return {name: value / whole for name, value in sorted(totals.items(), key=lambda kv: -kv[1])}, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--precisions", type=lambda v: v.split(","), default=["fp32", "bf16"],
                        help="comma-separated: fp32,bf16 (fp32 alone where bf16 is emulated, e.g. under an AVX2 cap)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mlm_ceiling.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    cfg = params.pretrain
    tok = load_tokenizer(args.tokenizer)
    model_cfg = params.model_config(tok.get_vocab_size())
    corpus = pd.read_parquet(args.data / CORPUS)["text"].tolist()
    steps = args.warmup + args.steps + 2
    # enough documents for both paths' steps (a packed row holds several short ones)
    encoded = pretraining.encode_documents(tok, corpus[: max(steps * max(OLD_BATCH, cfg.batch_size) * 4, 20000)])
    ways = paths(params, model_cfg, encoded, tok, steps)

    shapes = gemm_shapes(model_cfg, cfg.batch_size * cfg.max_length)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    ceiling = {name: matmul_ceiling(shapes, dtypes[name], args.reps) for name in args.precisions}
    ours = {f"{w} {p}": our_step(params, ways[w], p, args.warmup, args.steps) for w in ("old", "new") for p in args.precisions}
    for row in ours.values():
        row["flops_per_token"] = mlm_train_flops_per_token(model_cfg, row["mean_length"], cfg.mlm_probability)
        row["achieved_tflops"] = row["tokens_per_s"] * row["flops_per_token"] / 1e12
        row["fraction_of_ceiling"] = row["achieved_tflops"] / ceiling[row["precision"]]["ceiling_tflops"]

    def batches_of(path: Path_, count: int) -> list:
        stream = pretraining.batch_stream(path.rows, path.cfg, model_cfg.vocab_size, params.train.seed)
        return [b for b, _ in zip(stream, range(count))]

    start = time.perf_counter()
    new_batches = batches_of(ways["new"], args.warmup + args.steps)
    data_s = (time.perf_counter() - start) / len(new_batches)
    hf = hf_step(model_cfg, new_batches, cfg.lr, args.warmup)
    # what the pipeline runs here (minibert.precision), or the first measured precision where that one was not measured
    precision = resolve_precision(params.train.precision, torch.device("cpu"))
    precision = precision if precision in args.precisions else args.precisions[0]
    shares, top_ops = profile_step(params, ways["new"], new_batches[: 2 + args.profile_steps], precision)
    step_s = ours[f"new {precision}"]["mean_real_tokens_a_step"] / ours[f"new {precision}"]["tokens_per_s"]
    speedup = {p: ours[f"new {p}"]["tokens_per_s"] / ours[f"old {p}"]["tokens_per_s"] for p in args.precisions}

    print(f"MLM step at the profile's shape: batch {cfg.batch_size} x {cfg.max_length}, {model_cfg.num_layers} layers x "
          f"{model_cfg.hidden_size}, vocabulary {model_cfg.vocab_size}, {args.threads} threads; new path: packing "
          f"{cfg.packing}, dropout {cfg.dropout}, attention {cfg.attention}; old path: {OLD_BATCH} a step, padded, dropout "
          f"{model_cfg.hidden_dropout}, attention {model_cfg.attention}")
    for name, row in ceiling.items():
        detail = ", ".join(f"{s['gemm']} {s['tflops']:.3f}" for s in row["shapes"])
        print(f"ceiling {name}: {row['ceiling_tflops']:.3f} TFLOP/s  ({detail})")
    print("\n| step | real tokens/s | vs old, same precision | vs transformers | M FLOPs a token | TFLOP/s | of its ceiling |"
          "\n|---|---|---|---|---|---|---|")
    for name, row in ours.items():
        vs_old = row["tokens_per_s"] / ours[f"old {row['precision']}"]["tokens_per_s"]
        print(f"| {name} | {row['tokens_per_s']:,.0f} | {vs_old:.2f}x | {row['tokens_per_s'] / hf['tokens_per_s']:.2f}x | "
              f"{row['flops_per_token'] / 1e6:.1f} | {row['achieved_tflops']:.3f} | {row['fraction_of_ceiling']:.1%} |")
    print(f"| transformers BertForMaskedLM, fp32 (new batches) | {hf['tokens_per_s']:,.0f} | | 1.00x | | | |")
    print("\nnew path over old, same precision: " + ", ".join(f"{p} {x:.2f}x" for p, x in speedup.items())
          + f"; the profile's precision ({params.train.precision}) runs {precision} on this host")
    print(f"where the new {precision} step goes (self CPU time): " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    print("costliest ops: " + ", ".join(f"{o['op']} ({o['category']}) {o['share']:.0%}" for o in top_ops[:8]))
    print(f"data path (packing, batching and masking) alone: {data_s * 1e3:.1f} ms a batch, {data_s / step_s:.1%} of a step")
    result = {"date": date.today().isoformat(), **describe(), "torch": torch.__version__, "threads": args.threads,
              "shape": {"batch": cfg.batch_size, "length": cfg.max_length, **dataclasses.asdict(model_cfg)},
              "new_path": {"packing": cfg.packing, "dropout": cfg.dropout, "attention": cfg.attention}, "speedup_new_over_old": speedup,
              "ceiling": ceiling, "ours": ours, "transformers": hf, "profile_precision": precision, "profile_shares": shares, "profile_top_ops": top_ops,
              "data_seconds_a_batch": data_s, "data_share_of_step": data_s / step_s}
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
