"""The classifier loop every supervised stage shares: the teacher's fine-tuning, the word-CNN, and
distillation into a student.

Length-bucketed batches with dynamic padding; AdamW with warmup and decay; a validation pass every
``eval_every`` steps, and the best-scoring weights are the ones returned (model selection on the
validation split, never on the test split of record). Each caller describes its loop with a
``ClassifierLoop`` built from its own params section, so no stage borrows another's settings.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from minibert.batching import EpochStream, pad_batch
from minibert.distributed import World
from minibert.finetuning import ADVERSARIES, GradualUnfreezing, llrd_scale
from minibert.model import SequenceClassifier
from minibert.train_config import LoopConfig, OptimConfig
from minibert.trainer import Hooks, Tracker, fit
from minibert.validation import ConfigError
from pipeline.deadline import budget_s, record_trained
from pipeline.metrics import classification_metrics
from pipeline.progress import progress_bar
from pipeline.scoring import Validation


@dataclass(frozen=True)
class ClassifierLoop:
    """What ``train_classifier`` needs, and nothing else. ``section`` is the params section the values come
    from (it names the keys in errors); the seed techniques (LLRD, gradual unfreezing, FGM / PGD, patience)
    are off unless a caller turns them on."""

    section: str
    seed: int
    batch_size: int
    epochs: float
    time_budget_min: float | None
    optim: OptimConfig
    log_every: int
    eval_every: int
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    accumulate: int = 1
    llrd: float = 1.0
    unfreeze_every: int = 0
    adversarial: Literal["none", "fgm", "pgd"] = "none"
    adv_epsilon: float = 0.1
    pgd_alpha: float = 0.03
    pgd_steps: int = 3
    patience: int = 0
    class_weights: Literal["none", "balanced"] = "none"  # train.class_weights


def class_weight(mode: str, labels: np.ndarray, num_labels: int) -> Tensor | None:
    """``balanced``: each class's weight n / (K * n_class) over ``labels`` (scikit-learn's rule; a class with no
    row weighs 1), so that every class weighs the same in the loss; ``none``: None (every row weighs 1)."""
    if mode == "none":
        return None
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_labels).astype(np.float64)
    weights = np.where(counts > 0, len(labels) / (num_labels * np.maximum(counts, 1)), 1.0)
    return torch.tensor(weights, dtype=torch.float32)


def labelled_stream(sequences: list[list[int]], labels: np.ndarray, batch_size: int, seed: int,
                    world: World | None = None) -> EpochStream:
    """Endless (ids, mask, labels) batches, length-bucketed, reshuffled every epoch; under torchrun
    this rank's share of each."""
    world = world or World()

    def make(index: np.ndarray, _: torch.Generator) -> tuple[Tensor, ...]:
        ids, mask = pad_batch([sequences[i] for i in index], pad_id=0)
        return ids, mask, torch.as_tensor(labels[index])  # int labels, or float targets (distill)

    return EpochStream([len(s) for s in sequences], batch_size, seed, make, shard=(world.rank, world.size))


def classify_step(model: SequenceClassifier, batch: tuple[Tensor, ...], weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    ids, mask, labels = batch
    weight = None if weight is None else weight.to(labels.device)
    return F.cross_entropy(model(ids, mask), labels, weight=weight), mask.sum()  # a tensor: no host sync on a GPU


def eval_interval(cfg: ClassifierLoop, rows: int) -> int:
    """Steps between validation passes: ``cfg.eval_every``, or half an epoch where that is shorter, so that a small
    dataset's loop (a few hundred steps) is scored often enough to keep its best checkpoint."""
    return max(1, min(cfg.eval_every, steps_for(rows, cfg.batch_size * cfg.accumulate, 1.0) // 2))


def steps_for(rows: int, batch_size: int, epochs: float) -> int:
    return max(1, math.ceil(epochs * math.ceil(rows / batch_size)))


def train_classifier(
    model: SequenceClassifier, cfg: ClassifierLoop, train: tuple[list[list[int]], np.ndarray],
    val: Validation, tracker: Tracker, name: str = "finetune",
    step: Callable[[SequenceClassifier, tuple[Tensor, ...]], tuple[Tensor, int]] | None = None,
    world: World | None = None, phase: str | None = None, lr_scale: Callable[[str], float] | None = None,
) -> tuple[SequenceClassifier, dict]:
    """Train, scoring ``val`` every ``eval_interval`` steps; returns the best model and metrics.

    ``train``: encoded sequences and labels (or, for distillation, label + teacher-logit rows).
    ``phase`` (``pipeline.deadline.PHASES``) names the loop in the pipeline's deadline plan, which
    may shrink its time budget; None keeps ``cfg.time_budget_min``.
    ``val``: (model -> validation logits, validation labels). ``step`` computes (loss, tokens)
    for a batch (default: cross-entropy on the labels). Under torchrun (``world``) each rank
    trains on its share of every batch of ``cfg.batch_size``; every rank returns the same model.
    ``lr_scale`` (parameter name -> learning-rate factor) applies when ``cfg.llrd`` is off.
    ``cfg.class_weights`` weighs the default step's cross-entropy (a caller's ``step`` weighs its own).
    """
    world = world or World()
    world.check_batch(cfg.batch_size, f"{cfg.section}.batch_size")
    if world.distributed and cfg.unfreeze_every:
        raise ConfigError(f"{cfg.section}.unfreeze_every: gradual unfreezing is not supported across processes yet; set it to 0")
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
    loop = LoopConfig(max_steps=max_steps, time_budget_s=budget, log_every=cfg.log_every,
                      eval_every=eval_interval(cfg, len(train[0])),
                      accumulate=cfg.accumulate, precision=cfg.precision)
    with progress_bar(max_steps, name) as bar:
        hooks.progress = bar
        if step is None:
            # every class has training rows (prepare refuses a class without), so the largest label names the last
            step = partial(classify_step, weight=class_weight(cfg.class_weights, train[1], int(np.max(train[1])) + 1))
        result = fit(model, labelled_stream(train[0], train[1], cfg.batch_size, cfg.seed, world), step,
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
        "val_macro_f1": result.evals[best["index"]][1]["macro_f1"],
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
