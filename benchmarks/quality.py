"""Pretraining + fine-tuning quality at a CPU or GPU budget: what pretraining buys, measured.

Runs the pipeline's own stage functions (no DVC, no MLflow) on prepared data: MLM pretraining
with the profile's ``pretrain`` section, then fine-tuning from that encoder, then (with
``--scratch``) the same fine-tuning from random initialisation; scores the task's test split of
record (SST-2: GLUE dev; IMDb: test) through the task's sliding windows. Overrides use DVC's
``-S section.key=value`` syntax. Appends one JSON record per run to
benchmarks/results/quality.jsonl (and writes it to ``--out``).

The record holds each phase's wall seconds, pretraining tokens/s (mean of the training loop's
``tokens_per_s`` logs, real tokens), the model's training FLOPs per token and the MFU they
give against ``--peak-tflops`` (``benchmarks/flops.py``), and on CUDA the device and its peak
allocated memory. ``--calibrate-steps N`` times N pretraining steps first and sets
``pretrain.max_steps`` so that the LR schedule ends when ``pretrain.time_budget_min`` does;
``--deadline`` (Unix seconds) shrinks the time budgets so the whole run ends before it.

    python benchmarks/quality.py --tag bf16-prenorm -S train.precision=bf16 --scratch
    python benchmarks/quality.py --profile profiles/gpu.yaml --threads 8 --calibrate-steps 100 --out gpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from common import (
    ROOT,
    PrintingTracker,
    TaskData,
    add_params_args,
    finetune_and_score,
    load_with_overrides,
    parse_overrides,
    step_gaps,
)
from flops import H200_MEASURED_MATMUL_TFLOPS, mfu, mlm_train_flops_per_token
from tokenizers import Tokenizer

from minibert.checkpoint import load_model, save_model
from minibert.config import ModelConfig
from minibert.distributed import World
from minibert.model import build_mlm
from minibert.tokenizer import CLS, SEP, load_tokenizer, vocabulary_digest
from minibert.train_config import LoopConfig
from minibert.trainer import NullTracker, RecordingTracker
from pipeline import pretraining
from pipeline.io import read_table
from pipeline.params import Params
from pipeline.teacher import head_config

DEVICES = ("auto", "cpu", "cuda")


def say(**fields: object) -> None:
    """One JSON line on stdout, flushed (a log read while the run goes on shows it)."""
    print(json.dumps(fields, default=str), flush=True)


def choose_device(name: str) -> torch.device:
    """The device of ``--device``. ``cpu`` hides the GPUs from this process (before CUDA starts), so
    that pretraining.run, which trains on ``World().device()``, stays on the CPU as well."""
    if name == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda, but torch.cuda.is_available() is False")
    return World().device()


def synchronized_clock() -> float:
    """perf_counter once the GPU has finished what was queued (fit() itself never waits on the GPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def seconds_per_step(params: Params, model_cfg: ModelConfig, tok: Tokenizer, corpus: list[str], steps: int) -> float:
    """Mean wall seconds of a pretraining step, timed over ``steps`` steps of a throwaway model on
    real corpus batches: the first half (kernel loading, allocator warm-up, first sight of each batch shape) left out, and the slowest
    5 % of the rest (one-off stalls) trimmed."""
    cfg, shared = params.pretrain, params.train
    skip = steps // 2  # on a GPU, each new batch shape is slow once: 100 steps timed from step 10 gave 60 ms, the run 20 ms
    needed = (steps + 1) * cfg.batch_size
    # a seeded sample of documents is enough for the timed rows (a packed row holds several short ones); the run
    # itself encodes the whole corpus again, so encoding all of it here would be done twice
    sample = np.random.default_rng(shared.seed + 1).permutation(len(corpus))[: max(4 * needed, 20000)]
    rows = pretraining.training_rows(pretraining.encode_documents(tok, [corpus[i] for i in sample]), cfg, shared.seed + 1,
                                     tok.token_to_id(CLS), tok.token_to_id(SEP), needed)
    model = build_mlm(pretraining.training_config(cfg, model_cfg)).to(World().device())
    gaps = step_gaps(model, pretraining.batch_stream(rows, cfg, model_cfg.vocab_size, shared.seed), pretraining.training_step(cfg),
                     shared.optim(cfg.lr, cfg.warmup_ratio), LoopConfig(max_steps=steps, precision=shared.precision),
                     synchronized_clock)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    durations = np.sort(gaps[skip - 1:])
    return float(durations[: max(1, int(np.ceil(0.95 * len(durations))))].mean())


def with_budgets(params: Params, pretrain_min: float | None = None, max_steps: int | None = None,
                 transfer_min: float | None = None, finetune_min: float | None = None) -> Params:
    """``params`` with the given time budgets / step count replaced (None keeps the profile's)."""
    pre, fine = params.pretrain, params.finetune
    pre = dataclasses.replace(pre, time_budget_min=pre.time_budget_min if pretrain_min is None else pretrain_min,
                              max_steps=pre.max_steps if max_steps is None else max_steps)
    transfer = dataclasses.replace(fine.transfer, time_budget_min=fine.transfer.time_budget_min if transfer_min is None
                                   else transfer_min)
    fine = dataclasses.replace(fine, transfer=transfer,
                               time_budget_min=fine.time_budget_min if finetune_min is None else finetune_min)
    return dataclasses.replace(params, pretrain=pre, finetune=fine)


def finetune_minutes(params: Params, transfer: bool) -> float:
    """The fine-tuning phases' time budgets together (transfer only when it is on: the data has an intermediate
    task); inf if unbounded."""
    fine = params.finetune
    parts = [fine.time_budget_min] + ([fine.transfer.time_budget_min] if transfer else [])
    return float("inf") if None in parts else float(sum(parts))


def fit_finetune_to_deadline(params: Params, deadline: float | None, reserve_s: float, transfer: bool) -> Params:
    """Scale the transfer and fine-tuning budgets down together when they would overrun ``deadline``."""
    if deadline is None:
        return params
    left_min = (deadline - time.time() - reserve_s) / 60.0
    planned = finetune_minutes(params, transfer)
    if planned <= left_min:
        return params
    fine = params.finetune
    if planned == float("inf"):
        return with_budgets(params, transfer_min=max(left_min / 4, 0.1), finetune_min=max(left_min * 3 / 4, 0.1))
    scale = min(1.0, max(left_min, 0.2) / planned)
    say(deadline={"finetune_budgets_scaled_by": round(scale, 3)})
    return with_budgets(params, transfer_min=(fine.transfer.time_budget_min or 1.0) * scale,
                        finetune_min=fine.time_budget_min * scale)


def pretrain_throughput(history: RecordingTracker, metrics: dict, params: Params, model_cfg: ModelConfig,
                        peak_tflops: float) -> dict:
    """tokens/s of the pretraining loop (mean of its windows; and without the first, warm-up, window),
    model FLOPs per token, and MFU against ``peak_tflops`` and the measured H200 matmul rate."""
    rates = [v for _, v in history.series("tokens_per_s")]
    cfg = params.pretrain
    examples = metrics["steps"] * cfg.batch_size
    mean_length = metrics["approx_tokens_seen"] / max(examples, 1)
    out: dict = {"tokens_per_s_mean": float(np.mean(rates)) if rates else None,  # None: JSON null, never NaN
                 "tokens_per_s_after_first_window": float(np.mean(rates[1:])) if len(rates) > 1 else None,
                 "tokens_per_s_windows": len(rates), "mean_sequence_length": mean_length,
                 "tokens_per_s_overall": metrics["approx_tokens_seen"] / max(metrics["train_seconds"], 1e-9)}
    if mean_length > 2 and rates:
        flops = mlm_train_flops_per_token(model_cfg, mean_length, cfg.mlm_probability)
        rate = out["tokens_per_s_after_first_window"] if len(rates) > 1 else out["tokens_per_s_mean"]
        out.update(train_flops_per_token=flops, model_tflops_per_s=rate * flops / 1e12, peak_tflops=peak_tflops,
                   mfu=mfu(rate, flops, peak_tflops),
                   mfu_vs_measured_matmul=mfu(rate, flops, H200_MEASURED_MATMUL_TFLOPS))
    return out


def device_facts(device: torch.device) -> dict:
    facts: dict = {"device": str(device), "torch": torch.__version__, "python": platform.python_version()}
    if device.type == "cuda":
        facts.update(device_name=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                     max_memory_allocated_gib=torch.cuda.max_memory_allocated() / 2**30)
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--scratch", action="store_true", help="also fine-tune from random initialisation")
    parser.add_argument("--no-pretrain", action="store_true", help="only the from-scratch fine-tuning")
    parser.add_argument("--save", type=Path, help="write the pretrained encoder here (safetensors)")
    parser.add_argument("--save-classifier", type=Path,
                        help="write the classifier fine-tuned from the pretrained encoder here (safetensors)")
    parser.add_argument("--encoder", type=Path, help="fine-tune this saved encoder instead of pretraining one")
    parser.add_argument("--tag", default="")
    parser.add_argument("--device", choices=DEVICES, default="auto", help="auto: the GPU when there is one")
    parser.add_argument("--out", type=Path, help="also write the JSON record to this file")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="peak the MFU is measured against (default: H200 dense bf16 datasheet)")
    parser.add_argument("--calibrate-steps", type=int, default=0,
                        help="time this many pretraining steps first and set pretrain.max_steps to fill the time budget")
    parser.add_argument("--deadline", type=float, help="Unix time the whole run must end by: budgets shrink to fit")
    parser.add_argument("--reserve-s", type=float, default=60.0,
                        help="with --deadline: seconds kept for what the time budgets do not cover "
                             "(encoding, PPMI vectors, scoring)")
    args = parser.parse_args()
    started = time.perf_counter()
    device = choose_device(args.device)
    torch.set_num_threads(args.threads)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    tok = load_tokenizer(args.tokenizer)
    model_cfg = params.model_config(tok.get_vocab_size())
    record: dict = {"tag": args.tag, "when": datetime.now(UTC).isoformat(timespec="seconds"),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, {args.threads} threads",
                    "params": str(args.params.relative_to(ROOT) if args.params.is_relative_to(ROOT) else args.params),
                    "overrides": args.overrides, "task": params.data.dataset, "model": dataclasses.asdict(model_cfg),
                    **device_facts(device)}
    seconds: dict[str, float] = {}
    say(start={k: record[k] for k in ("tag", "machine", "device", "torch", "python", "params", "overrides")}
        | ({"device_name": record["device_name"]} if "device_name" in record else {}))
    mark = time.perf_counter()
    data = TaskData(params, tok, args.data)
    seconds["task_data"] = time.perf_counter() - mark
    transfer = data.prepared.intermediate is not None  # the teacher's transfer phase runs
    mlm = None
    if args.encoder:
        mlm, model_cfg, _ = load_model(args.encoder)
        record["encoder"] = str(args.encoder)
    elif not args.no_pretrain:
        mark = time.perf_counter()
        corpus = read_table(args.data / "corpus.parquet", ["text"])["text"].tolist()
        seconds["read_corpus"] = time.perf_counter() - mark
        budget_min = params.pretrain.time_budget_min
        if args.deadline is not None and budget_min is not None:
            left_min = (args.deadline - time.time() - args.reserve_s) / 60.0 - finetune_minutes(params, transfer)
            if left_min < budget_min:
                budget_min = min(budget_min, max(left_min, 0.5))  # at least half a minute of pretraining
                record["deadline_pretrain_time_budget_min"] = budget_min
                say(deadline={"pretrain_time_budget_min": round(budget_min, 3)})
        max_steps = None
        if args.calibrate_steps and budget_min is not None:
            mark = time.perf_counter()
            try:
                step_s = seconds_per_step(params, model_cfg, tok, corpus, args.calibrate_steps)
                max_steps = max(1, min(int(0.95 * budget_min * 60.0 / step_s), 1_000_000))
                record["calibration"] = {"seconds_per_step": step_s, "max_steps": max_steps,
                                         "profile_max_steps": params.pretrain.max_steps}
            except Exception:  # one shot on a remote machine: report it and go on with the profile's max_steps
                traceback.print_exc()
                record["calibration"] = {"error": traceback.format_exc(limit=3)}
            seconds["calibrate"] = time.perf_counter() - mark
            say(calibration=record["calibration"])
        params = with_budgets(params, pretrain_min=budget_min, max_steps=max_steps)
        record["pretrain_budget"] = {"time_budget_min": params.pretrain.time_budget_min, "max_steps": params.pretrain.max_steps}
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        history = RecordingTracker()
        mark = time.perf_counter()
        mlm, record["pretrain"] = pretraining.run(params.pretrain, params.train, model_cfg, tok, corpus,
                                                  PrintingTracker(history, "pretrain"))
        seconds["pretrain"] = time.perf_counter() - mark
        record["pretrain_throughput"] = pretrain_throughput(history, record["pretrain"], params, model_cfg, args.peak_tflops)
        if device.type == "cuda":
            record["pretrain_max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        say(pretrain=record["pretrain"], pretrain_throughput=record["pretrain_throughput"])
        if args.save:
            save_model(mlm, model_cfg, args.save)
    params = fit_finetune_to_deadline(params, args.deadline, args.reserve_s / 2, transfer)
    record["finetune_budgets_min"] = {"finetune": params.finetune.time_budget_min,
                                      "transfer": params.finetune.transfer.time_budget_min}
    failed = False
    variants = ([("finetune", mlm.backbone)] if mlm is not None else []) + \
        ([("scratch", None)] if args.scratch or args.no_pretrain else [])
    for key, backbone in variants:
        mark = time.perf_counter()
        try:
            keep = None
            if key == "finetune" and args.save_classifier:
                keep = lambda m: save_model(m, model_cfg, args.save_classifier,  # noqa: E731
                                            head_config(params.finetune, data.prepared.num_labels), vocabulary_digest(tok))
            record[key] = finetune_and_score(params, model_cfg, backbone, data, device, PrintingTracker(NullTracker(), key), keep)
        except Exception:  # keep what pretraining measured: the record is still written, the exit status says it failed
            traceback.print_exc()
            record[f"{key}_error"], failed = traceback.format_exc(limit=5), True
            continue
        finally:
            seconds[key] = time.perf_counter() - mark
        say(**{key: record[key]})
    seconds["total"] = time.perf_counter() - started
    record["seconds"] = seconds
    record.update(device_facts(device))  # peak memory over the whole run
    line = json.dumps(record, default=str)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    results = ROOT / "benchmarks" / "results" / "quality.jsonl"
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a") as f:
        f.write(line + "\n")
    summarise(record, args.tag)
    if failed:
        raise SystemExit(1)


def summarise(record: dict, tag: str) -> None:
    """The lines to read first: accuracy, phase seconds, throughput and MFU."""
    for key in ("finetune", "scratch"):
        if key in record:
            print(f"{tag or 'run'} {key}: test accuracy {100 * record[key]['test_accuracy']:.2f} "
                  f"(val {100 * record[key]['val_accuracy']:.2f}, {record[key]['train_seconds']:.0f} s)", flush=True)
    if "finetune" in record and record["task"] == "sst2":
        accuracy, minutes = 100 * record["finetune"]["test_accuracy"], record["seconds"]["total"] / 60
        met = accuracy >= 89.7 and minutes <= 15
        print(f"issue 4 GPU target (SST-2 dev >= 89.7 within 15 min): {accuracy:.2f} in {minutes:.1f} min of this "
              f"process: {'met' if met else 'not met'}", flush=True)
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in record["seconds"].items()), flush=True)
    tp = record.get("pretrain_throughput")
    if tp and "mfu" in tp:
        pre = record["pretrain"]
        print(f"pretrain: {pre['steps']} steps in {pre['train_seconds']:.1f} s, MLM accuracy {100 * pre['mlm_accuracy']:.2f}; "
              f"{tp['tokens_per_s_after_first_window'] or tp['tokens_per_s_mean']:.0f} tokens/s (mean over windows {tp['tokens_per_s_mean']:.0f}); "
              f"{tp['train_flops_per_token'] / 1e6:.1f} MFLOP/token; {tp['model_tflops_per_s']:.1f} TFLOP/s; "
              f"MFU {100 * tp['mfu']:.2f} % of {tp['peak_tflops']:.0f}, {100 * tp['mfu_vs_measured_matmul']:.2f} % of "
              f"{H200_MEASURED_MATMUL_TFLOPS:.0f} TFLOP/s", flush=True)
    if "max_memory_allocated_gib" in record:
        print(f"{record['device_name']}: max memory allocated {record['max_memory_allocated_gib']:.2f} GiB; "
              f"torch {record['torch']}, CUDA {record['cuda']}", flush=True)
    print(f"python {sys.version.split()[0]}", flush=True)


if __name__ == "__main__":
    main()
