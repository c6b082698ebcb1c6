"""What the quality benchmarks share: params with -S overrides, and fine-tune-then-score."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch
import yaml
from tokenizers import Tokenizer

from minibert.config import ModelConfig
from minibert.model import Backbone
from minibert.trainer import RecordingTracker
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.stages.finetune import build, train_classifier, transfer_phase, validation
from pipeline.task import encode_train, load_split

ROOT = Path(__file__).resolve().parent.parent


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """DVC's ``-S section.key=value`` (value parsed as YAML) into a nested params dict."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: override {item!r} needs the form section.key=value")
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return raw


def load_with_overrides(path: Path, overrides: list[str]) -> Params:
    """The params file with overrides, validated by the one params reader."""
    raw = apply_overrides(yaml.safe_load(path.read_text()) or {}, overrides)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(raw, f)
    try:
        return load_params(f.name)
    finally:
        os.unlink(f.name)


class TaskData:
    """The task's train / val / test splits, encoded once and shared by every variant."""

    def __init__(self, params: Params, tok: Tokenizer, data: Path) -> None:
        self.tok, self.dir = tok, data
        task = params.task
        self.train = encode_train(tok, load_split(data, task, "train"), task)
        self.val = validation(tok, load_split(data, task, "val"), task)
        self.test = validation(tok, load_split(data, task, "test"), task)


def finetune_and_score(params: Params, model_cfg: ModelConfig, backbone: Backbone | None, data: TaskData) -> dict:
    """Fine-tune (from ``backbone``, or random init when None) and score the test split of record."""
    torch.manual_seed(params.finetune.seed)
    model = build(params.finetune, model_cfg, backbone)
    tracker = RecordingTracker()
    model, transfer = transfer_phase(model, params.finetune, params.task, data.tok, data.dir, tracker)
    model, metrics = train_classifier(model, params.finetune, data.train, data.val, tracker)
    metrics.update(transfer)
    start = time.perf_counter()
    scored = classification_metrics(data.test[1], data.test[0](model))
    return {**metrics, "test_accuracy": scored["accuracy"], "test_f1": scored["f1"],
            "test_seconds": time.perf_counter() - start}
