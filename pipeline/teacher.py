"""The teacher's recipe: a classifier on the pretrained encoder, an optional intermediate task first
(STILTs: IMDb reviews before SST-2). The ``finetune`` stage trains it; benchmarks build the same
teacher through these functions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
from tokenizers import Tokenizer

from minibert.config import ClassifierConfig, ModelConfig
from minibert.distributed import World
from minibert.model import Backbone, SequenceClassifier, build_classifier
from minibert.trainer import Tracker
from pipeline.classifier_loop import ClassifierLoop, PrefixedTracker, train_classifier
from pipeline.params import FinetuneParams, TaskParams, TransferParams
from pipeline.scoring import validation
from pipeline.splits import load_split, split_path
from pipeline.task import encode_train


def finetune_loop(cfg: FinetuneParams) -> ClassifierLoop:
    """The classifier loop as the ``finetune`` section sets it."""
    return ClassifierLoop(
        section="finetune", seed=cfg.seed, batch_size=cfg.batch_size, epochs=cfg.epochs, time_budget_min=cfg.time_budget_min,
        optim=cfg.optim, log_every=cfg.log_every, eval_every=cfg.eval_every, precision=cfg.precision, accumulate=cfg.accumulate,
        llrd=cfg.llrd, unfreeze_every=cfg.unfreeze_every, adversarial=cfg.adversarial, adv_epsilon=cfg.adv_epsilon,
        pgd_alpha=cfg.pgd_alpha, pgd_steps=cfg.pgd_steps, patience=cfg.patience,
    )


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
    loop = dataclasses.replace(finetune_loop(cfg), epochs=cfg.transfer.epochs, time_budget_min=cfg.transfer.time_budget_min)
    (_, train_df), (_, val_df) = splits
    model, metrics = train_classifier(model, loop, encode_train(tok, train_df, other), validation(tok, val_df, other, cfg.precision),
                                      PrefixedTracker(tracker, "transfer_"), name=f"transfer ({other.name})", world=world,
                                      phase=phase)
    return model, {f"transfer_{k}": v for k, v in metrics.items()}


def head_config(cfg: FinetuneParams) -> ClassifierConfig:
    """The classifier head that ``build`` makes and a saved classifier records."""
    return ClassifierConfig(num_labels=2, pooling=cfg.pooling, dropout=cfg.dropout)


def build(cfg: FinetuneParams, model_cfg: ModelConfig, pretrained: Backbone | None) -> SequenceClassifier:
    return build_classifier(model_cfg, head_config(cfg), backbone=pretrained)
