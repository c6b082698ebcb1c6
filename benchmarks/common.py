"""What the benchmarks share: params with -S overrides, step timing, and fine-tune-then-score."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml
from tokenizers import Tokenizer

from minibert.config import ModelConfig
from minibert.distributed import World
from minibert.model import Backbone
from minibert.train_config import LoopConfig
from minibert.trainer import Hooks, NullTracker, RecordingTracker, Tracker, fit
from pipeline.classifier_loop import train_classifier
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.scoring import validation
from pipeline.splits import load_split, prepared
from pipeline.task import encode_train
from pipeline.teacher import build, finetune_loop, transfer_phase, transfer_splits
from pipeline.tfidf import fit_baseline

ROOT = Path(__file__).resolve().parent.parent


def add_params_args(parser: argparse.ArgumentParser) -> None:
    """The options every quality benchmark takes: params file, profile overlay, -S overrides, data, tokenizer, threads."""
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--profile", type=Path, default=None,
                        help="a profile overlay such as profiles/imdb.yaml (default: the profile.yaml beside --params)")
    parser.add_argument("-S", "--set", dest="overrides", action="append", default=[], help="section.key=value")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "prepared")
    parser.add_argument("--tokenizer", type=Path, default=ROOT / "models" / "tokenizer" / "tokenizer.json")
    parser.add_argument("--threads", type=int, default=2)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """DVC's ``-S section.key=value`` strings as {"section.key": value parsed as YAML}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: override {item!r} needs the form section.key=value")
        out[key] = yaml.safe_load(value)
    return out


def load_with_overrides(path: Path, overrides: dict[str, Any], profile: Path | None = None) -> Params:
    """The params file under its profile overlay (``profile``, or the ``profile.yaml`` beside it) with
    {"section.key": value} overrides, validated by the one params reader."""
    return load_params(path, profile, overrides)


def scorers_by_reading(tok: Tokenizer, frames: list[pd.DataFrame]) -> Callable[[Any], list]:
    """``reads`` (a TaskParams: windows and cut) -> the ``validation`` scorers of ``frames`` as a model
    reading that way sees them; built once a way of reading (the teacher's, the word-CNN's)."""
    built: dict[Any, list] = {}

    def scorers(reads: Any) -> list:
        if reads not in built:
            built[reads] = [validation(tok, df, reads) for df in frames]
        return built[reads]

    return scorers


def step_gaps(model: torch.nn.Module, batches: Iterable, loss_fn: Callable, optim, loop: LoopConfig,
              clock: Callable[[], float] = time.perf_counter) -> np.ndarray:
    """Wall seconds between consecutive optimizer steps of ``fit`` (``loop.max_steps - 1`` gaps, in step
    order): the first step (kernel loading, allocator warm-up) falls before the first stamp. ``clock``
    must wait for the device (a synchronizing clock on a GPU)."""
    stamps: list[float] = []
    fit(model, batches, loss_fn, optim, dataclasses.replace(loop, log_every=loop.max_steps), NullTracker(),
        Hooks(progress=lambda step, loss: stamps.append(clock())))
    return np.diff(np.asarray(stamps))


class TaskData:
    """The task's train / val / test splits, encoded once and shared by every variant, and what
    ``dataset.json`` says of them (class names, intermediate task)."""

    def __init__(self, params: Params, tok: Tokenizer, data: Path, precision: str = "fp32") -> None:
        self.tok, self.dir, self.prepared = tok, data, prepared(data)
        task = params.task
        self.train = encode_train(tok, load_split(data, "train"), task)
        self.val = validation(tok, load_split(data, "val"), task, precision)
        self.test = validation(tok, load_split(data, "test"), task, precision)


class PrintingTracker:
    """Prints a logged record (one JSON line) at most every ``every_s`` seconds, passing every record on
    to ``inner``: progress in a log file without a line a step."""

    def __init__(self, inner: Tracker, label: str, every_s: float = 30.0) -> None:
        self.inner, self.label, self.every_s = inner, label, every_s
        self.last = time.perf_counter()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.inner.log_metrics(metrics, step)
        now = time.perf_counter()
        if now - self.last >= self.every_s or any(k.startswith(("eval_", "transfer_eval_")) for k in metrics):
            self.last = now
            shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
            print(json.dumps({self.label: {"step": step, **shown}}), flush=True)


def finetune_and_score(params: Params, model_cfg: ModelConfig, backbone: Backbone | None, data: TaskData,
                       device: torch.device | None = None, tracker: Tracker | None = None,
                       keep: Callable[[torch.nn.Module], None] | None = None) -> dict:
    """Fine-tune (from ``backbone``, or random init when None) and score the test split of record.

    ``device``: where the classifier trains and predicts; default this process's GPU when there
    is one (as the finetune stage does), else the CPU. ``tracker`` also receives the training logs.
    ``keep`` receives the fine-tuned classifier (to save it, say) before it is scored.
    """
    torch.manual_seed(params.train.seed)
    model = build(params.finetune, model_cfg, backbone, data.prepared.num_labels).to(device or World().device())
    tracker = RecordingTracker(tracker)
    splits = transfer_splits(data.dir)
    model, transfer = transfer_phase(model, params.finetune, params.train, params.task, data.tok, splits, tracker)
    model, metrics = train_classifier(model, finetune_loop(params.finetune, params.train), data.train, data.val, tracker)
    metrics.update(transfer)
    if keep is not None:
        keep(model)
    start = time.perf_counter()
    scored = classification_metrics(data.test[1], data.test[0](model))
    # test_f1: macro-F1 (records written before the data API change hold the binary F1 of class 1)
    return {**metrics, "test_accuracy": scored["accuracy"], "test_f1": scored["macro_f1"],
            "test_seconds": time.perf_counter() - start}


def accuracy(prob: np.ndarray, labels: np.ndarray) -> float:
    """Share of rows whose highest-scoring class is the label."""
    return float((prob.argmax(axis=1) == labels).mean())


def fit_tfidf_with_extra(params: Params, data: Path, train_df: pd.DataFrame, val_df: pd.DataFrame):
    """The ``baseline`` section's TF-IDF + LR fitted as the student's soft targets see it: the task's
    training rows plus the intermediate task's labelled texts (when the dataset's description names one)."""
    fit_rows = train_df
    if prepared(data).intermediate is not None:
        fit_rows = pd.concat([train_df, load_split(data, "train", intermediate=True)])
    baseline, _ = fit_baseline(params.baseline, fit_rows, val_df)
    return baseline, len(fit_rows)
