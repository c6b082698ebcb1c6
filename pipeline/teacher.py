"""The teacher's recipe: a classifier on the pretrained encoder, one epoch on an intermediate task first when
the dataset's description names one (STILTs: IMDb reviews before SST-2). The ``finetune`` stage trains it; benchmarks
build the same teacher through these functions.
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
from pipeline.params import FinetuneParams, TaskParams, TrainParams
from pipeline.scoring import validation
from pipeline.splits import load_split, prepared, split_path
from pipeline.task import encode_train

TRANSFER_EPOCHS = 1.0  # passes over the intermediate task's training rows


def finetune_loop(cfg: FinetuneParams, shared: TrainParams) -> ClassifierLoop:
    """The classifier loop as the ``finetune`` and ``train`` sections set it."""
    return ClassifierLoop(
        section="finetune", seed=shared.seed, batch_size=cfg.batch_size, epochs=cfg.epochs, time_budget_min=cfg.time_budget_min,
        optim=shared.optim(cfg.lr, cfg.warmup_ratio), log_every=shared.log_every, eval_every=shared.eval_every,
        precision=shared.precision, llrd=cfg.llrd, unfreeze_every=cfg.unfreeze_every, adversarial=cfg.adversarial,
        adv_epsilon=cfg.adv_epsilon, class_weights=shared.class_weights,
    )


def transfer_task(cfg: FinetuneParams, task: TaskParams) -> TaskParams:
    """How the teacher reads the intermediate task: head and tail of ``transfer.max_length`` tokens, windows
    stepping 3/4 of that in validation."""
    length = cfg.transfer.max_length
    return dataclasses.replace(task, max_length=length, stride=length * 3 // 4, truncation="head_tail")


def transfer_splits(data_dir: Path) -> list[tuple[Path, pd.DataFrame]]:
    """(path, table) of the intermediate task's train and val splits, read once; [] when there is none."""
    if prepared(data_dir).intermediate is None:
        return []
    return [(split_path(data_dir, split, intermediate=True), load_split(data_dir, split, intermediate=True))
            for split in ("train", "val")]


def transfer_phase(
    model: SequenceClassifier, cfg: FinetuneParams, shared: TrainParams, task: TaskParams, tok: Tokenizer,
    splits: list[tuple[Path, pd.DataFrame]], tracker: Tracker, world: World | None = None, phase: str | None = None,
) -> tuple[SequenceClassifier, dict]:
    """Train on the intermediate task's ``splits`` first (no-op when empty); metrics prefixed ``transfer_``.
    ``phase``: as ``train_classifier``'s (the stage passes "transfer")."""
    if not splits:
        return model, {}
    other = transfer_task(cfg, task)
    loop = dataclasses.replace(finetune_loop(cfg, shared), epochs=TRANSFER_EPOCHS, time_budget_min=cfg.transfer.time_budget_min)
    (_, train_df), (_, val_df) = splits
    model, metrics = train_classifier(model, loop, encode_train(tok, train_df, other), validation(tok, val_df, other, shared.precision),
                                      PrefixedTracker(tracker, "transfer_"), name="transfer", world=world,
                                      phase=phase)
    return model, {f"transfer_{k}": v for k, v in metrics.items()}


def head_config(cfg: FinetuneParams, num_labels: int) -> ClassifierConfig:
    """The classifier head that ``build`` makes and a saved classifier records."""
    return ClassifierConfig(num_labels=num_labels, pooling=cfg.pooling, dropout=cfg.dropout)


def build(cfg: FinetuneParams, model_cfg: ModelConfig, pretrained: Backbone | None, num_labels: int) -> SequenceClassifier:
    return build_classifier(model_cfg, head_config(cfg, num_labels), backbone=pretrained)
