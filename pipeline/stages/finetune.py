"""finetune: the SST-2 sentiment classifier, initialised from the pretrained encoder.

Length-bucketed batches with dynamic padding; AdamW with warmup and decay; validation accuracy
every ``eval_every`` steps, and the best-scoring weights are the ones written (early stopping
by model selection on the validation split, never on GLUE dev). ``from_pretrained: false``
trains the same classifier from random initialisation, the ablation that shows what
pretraining buys.

``transfer.task`` (intermediate-task transfer, as in STILTs) first trains the same classifier
on another labelled task of the prepared data (IMDb reviews for SST-2), selected on that task's
validation split, then fine-tunes it on the profile's task; its metrics carry a ``transfer_``
prefix.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor

from minibert.batching import EpochStream, pad_batch
from minibert.checkpoint import check_tokenizer, load_model, save_model
from minibert.config import ClassifierConfig, ModelConfig
from minibert.distributed import World
from minibert.finetuning import ADVERSARIES, GradualUnfreezing, llrd_scale
from minibert.inference import predict_windows
from minibert.model import Backbone, SequenceClassifier, build_classifier
from minibert.tokenizer import CLS, SEP, load_tokenizer, vocabulary_digest
from minibert.train_config import LoopConfig
from minibert.trainer import Hooks, RecordingTracker, Tracker, fit
from minibert.validation import ConfigError
from minibert.windows import document_windows
from pipeline.curves import write_curves
from pipeline.deadline import budget_s, record_trained
from pipeline.metrics import classification_metrics
from pipeline.params import FinetuneParams, Params, TaskParams, TransferParams, load_params
from pipeline.progress import progress_bar
from pipeline.splits import load_split, split_path
from pipeline.task import encode_documents, encode_train


def labelled_stream(sequences: list[list[int]], labels: np.ndarray, batch_size: int, seed: int,
                    world: World | None = None) -> EpochStream:
    """Endless (ids, mask, labels) batches, length-bucketed, reshuffled every epoch; under torchrun
    this rank's share of each."""
    world = world or World()

    def make(index: np.ndarray, _: torch.Generator) -> tuple[Tensor, ...]:
        ids, mask = pad_batch([sequences[i] for i in index], pad_id=0)
        return ids, mask, torch.as_tensor(labels[index])  # int labels, or float targets (distill)

    return EpochStream([len(s) for s in sequences], batch_size, seed, make, shard=(world.rank, world.size))


def classify_step(model: SequenceClassifier, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
    ids, mask, labels = batch
    return F.cross_entropy(model(ids, mask), labels), mask.sum()  # a tensor: no host sync on a GPU


class Validation(NamedTuple):
    """What a loop scores itself on: model -> logits, the labels, and the tokens it reads."""

    logits: Callable[[SequenceClassifier], np.ndarray]
    labels: np.ndarray
    tokens: int = 0  # tokens its windows hold: the final pass's time is kept back from the budget by them (trainer.fit)


def steps_for(rows: int, batch_size: int, epochs: float) -> int:
    return max(1, math.ceil(epochs * math.ceil(rows / batch_size)))


def train_classifier(
    model: SequenceClassifier, cfg: FinetuneParams, train: tuple[list[list[int]], np.ndarray],
    val: Validation, tracker: Tracker, name: str = "finetune",
    step: Callable[[SequenceClassifier, tuple[Tensor, ...]], tuple[Tensor, int]] | None = None,
    world: World | None = None, phase: str | None = None, lr_scale: Callable[[str], float] | None = None,
) -> tuple[SequenceClassifier, dict]:
    """Train, scoring ``val`` every ``eval_every`` steps; returns the best model and metrics.

    ``train``: encoded sequences and labels (or, for distillation, label + teacher-logit rows).
    ``phase`` (``pipeline.deadline.PHASES``) names the loop in the pipeline's deadline plan, which
    may shrink its time budget; None keeps ``cfg.time_budget_min``.
    ``val``: (model -> validation logits, validation labels). ``step`` computes (loss, tokens)
    for a batch (default: cross-entropy on the labels). Under torchrun (``world``) each rank
    trains on its share of every batch of ``cfg.batch_size``; every rank returns the same model.
    ``lr_scale`` (parameter name -> learning-rate factor) applies when ``cfg.llrd`` is off.
    """
    world = world or World()
    world.check_batch(cfg.batch_size, "finetune.batch_size (or distill.batch_size)")
    if world.distributed and cfg.unfreeze_every:
        raise ConfigError("finetune.unfreeze_every: gradual unfreezing is not supported across processes yet; set it to 0")
    trainable_before = [param.requires_grad for param in model.parameters()]  # a frozen table (word-CNN) stays so
    best: dict = {"accuracy": -1.0, "index": -1, "state": None}
    n_evals = 0

    def evaluate(m: SequenceClassifier) -> dict[str, float]:
        nonlocal n_evals
        metrics = classification_metrics(val.labels, val.logits(m))
        if metrics["accuracy"] > best["accuracy"]:
            best.update(accuracy=metrics["accuracy"], index=n_evals, state=copy.deepcopy(m.state_dict()))
        n_evals += 1
        return metrics

    def patience_spent() -> bool:
        return cfg.patience > 0 and n_evals - 1 - best["index"] >= cfg.patience

    max_steps = steps_for(len(train[0]), cfg.batch_size * cfg.accumulate, cfg.epochs)
    budget, budget_metrics = budget_s(phase, cfg.time_budget_min)  # shrunk when the pipeline runs behind
    hooks = Hooks(
        evaluate=evaluate,
        evaluate_tokens=val.tokens,
        lr_scale=llrd_scale(len(model.backbone.encoder.layers), cfg.llrd) if cfg.llrd < 1.0 else lr_scale,
        before_step=GradualUnfreezing(model, cfg.unfreeze_every) if cfg.unfreeze_every else None,
        adversary=ADVERSARIES[cfg.adversarial](cfg.adv_epsilon, cfg.pgd_alpha, cfg.pgd_steps),
        should_stop=patience_spent,
    )
    loop = LoopConfig(max_steps=max_steps, time_budget_s=budget, log_every=cfg.log_every, eval_every=cfg.eval_every,
                      accumulate=cfg.accumulate, precision=cfg.precision)
    with progress_bar(max_steps, name) as bar:
        hooks.progress = bar
        result = fit(model, labelled_stream(train[0], train[1], cfg.batch_size, cfg.seed, world), step or classify_step,
                     cfg.optim, loop, tracker, hooks, world=world)
    if world.main:
        record_trained(phase, result.seconds - result.seconds_before_resume)
        # other ranks may read the plan before this lands: their budgets differ by a moment, and
        # fit trains every rank on rank 0's budget and clock
    for param, trainable in zip(model.parameters(), trainable_before, strict=True):
        param.requires_grad_(trainable)  # undo any unfreezing schedule cut short; frozen tables stay frozen
    model.load_state_dict(best["state"])
    metrics = {
        "val_accuracy": best["accuracy"],
        "val_f1": result.evals[best["index"]][1]["f1"],
        "best_step": result.evals[best["index"]][0],
        "steps": result.steps,
        "stopped_by_budget": result.stopped_by == "time_budget",
        "stopped_early": result.stopped_by == "hook",
        "bf16_autocast": result.precision == "bf16",  # precision auto: what this machine got
        "train_seconds": result.seconds,
        "epochs": result.steps * cfg.batch_size * cfg.accumulate / len(train[0]),
        **budget_metrics,
    }
    return model.eval(), metrics


class PrefixedTracker:
    """Passes metrics on to ``inner`` with ``prefix`` on every name."""

    def __init__(self, inner: Tracker, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.inner.log_metrics({f"{self.prefix}{k}": v for k, v in metrics.items()}, step)


def transfer_task(cfg: TransferParams, task: TaskParams) -> TaskParams:
    return TaskParams(name=cfg.task, max_length=cfg.max_length, stride=cfg.stride, aggregate=task.aggregate,
                      truncation=cfg.truncation)


def transfer_splits(cfg: FinetuneParams, task: TaskParams, data_dir: Path) -> list[tuple[Path, pd.DataFrame]]:
    """(path, table) of the transfer task's train and val splits, read once; [] when transfer is off."""
    if cfg.transfer.task == "none":
        return []
    other = transfer_task(cfg.transfer, task)
    return [(split_path(data_dir, other, split), load_split(data_dir, other, split)) for split in ("train", "val")]


def transfer_phase(
    model: SequenceClassifier, cfg: FinetuneParams, task: TaskParams, tok: Tokenizer,
    splits: list[tuple[Path, pd.DataFrame]], tracker: Tracker, world: World | None = None, phase: str | None = None,
) -> tuple[SequenceClassifier, dict]:
    """Train on the transfer task's ``splits`` first (no-op when empty); metrics prefixed ``transfer_``.
    ``phase``: as ``train_classifier``'s (the stage passes "transfer")."""
    if not splits:
        return model, {}
    other = transfer_task(cfg.transfer, task)
    phase_cfg = dataclasses.replace(cfg, epochs=cfg.transfer.epochs, time_budget_min=cfg.transfer.time_budget_min)
    (_, train_df), (_, val_df) = splits
    model, metrics = train_classifier(model, phase_cfg, encode_train(tok, train_df, other), validation(tok, val_df, other, cfg.precision),
                                      PrefixedTracker(tracker, "transfer_"), name=f"transfer ({other.name})", world=world,
                                      phase=phase)
    return model, {f"transfer_{k}": v for k, v in metrics.items()}


def head_config(cfg: FinetuneParams) -> ClassifierConfig:
    """The classifier head that ``build`` makes and a saved classifier records."""
    return ClassifierConfig(num_labels=2, pooling=cfg.pooling, dropout=cfg.dropout)


def build(cfg: FinetuneParams, model_cfg: ModelConfig, pretrained: Backbone | None) -> SequenceClassifier:
    return build_classifier(model_cfg, head_config(cfg), backbone=pretrained)


def validation(tok: Tokenizer, df: pd.DataFrame, task: TaskParams, precision: str = "fp32") -> Validation:
    """(model -> logits on ``df`` through the task's sliding windows, labels, tokens the windows
    hold); ``precision`` as the training loop's, so that a bf16 run's validation passes inside its
    time budget run in bf16 too."""
    docs = encode_documents(tok, df["text"].tolist())
    windows, counts = document_windows(docs, task.max_length, task.stride, tok.token_to_id(CLS), tok.token_to_id(SEP))
    # the windows are the same every pass: cut once, scored each pass
    return Validation(lambda m: predict_windows(m, windows, counts, task.aggregate, 128, precision),
                      df["label"].to_numpy(), sum(len(w) for w in windows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--pretrained", type=Path, default=Path("models/pretrain/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/finetune.json"))
    parser.add_argument("--curves", type=Path, default=Path("plots/curves/finetune.csv"),
                        help="training curves of both phases (DVC plot); the PNG goes beside it")
    args = parser.parse_args(argv)
    # mlflow only where a stage logs: the training code stays importable without it
    from pipeline.stages.common import finish_stage
    from pipeline.tracking import stage_run

    params: Params = load_params()
    cfg, task = params.finetune, params.task
    world = World.from_env()  # several processes under torchrun, else one
    world.init()
    train_path, val_path = split_path(args.data, task, "train"), split_path(args.data, task, "val")
    transfer = transfer_splits(cfg, task, args.data)
    inputs = [train_path, val_path, *(path for path, _ in transfer), args.tokenizer, args.pretrained]
    with stage_run("finetune", params, inputs) as tracker:
        torch.manual_seed(cfg.seed)
        tok = load_tokenizer(args.tokenizer)
        train_df, val_df = load_split(args.data, task, "train"), load_split(args.data, task, "val")
        tracker.log_dataset(train_df, train_path.stem, train_path, context="training")
        tracker.log_dataset(val_df, val_path.stem, val_path, context="validation")
        for (path, df), context in zip(transfer, ("transfer training", "transfer validation")):
            tracker.log_dataset(df, path.stem, path, context=context)
        if cfg.from_pretrained:
            check_tokenizer(args.pretrained, tok, args.tokenizer)
            mlm, model_cfg, _ = load_model(args.pretrained)
            backbone = mlm.backbone
        else:
            model_cfg, backbone = params.model_config(tok.get_vocab_size()), None
        model = build(cfg, model_cfg, backbone).to(world.device())  # this rank's GPU when there is one
        recorder = RecordingTracker(tracker)
        model, transfer_metrics = transfer_phase(model, cfg, task, tok, transfer, recorder, world, phase="transfer")
        model, metrics = train_classifier(model, cfg, encode_train(tok, train_df, task), validation(tok, val_df, task, cfg.precision),
                                          recorder, world=world, phase="finetune")
        metrics.update(transfer_metrics, processes=world.size)
        if not world.main:  # rank 0 writes the outputs and logs the run
            return
        save_model(model, model_cfg, args.out, head_config(cfg), vocabulary_digest(tok))
        curves = write_curves(recorder.history, args.curves, task.name, f"fine-tuning on {task.name}")
        finish_stage(tracker, metrics, args.metrics, {args.out: "checkpoint", **dict.fromkeys(curves, "curves")})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
