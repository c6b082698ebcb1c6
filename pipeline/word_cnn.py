"""The word-level CNN (``minibert.textcnn``, Kim 2014) as a soft-target source: built over the pretrained
encoder's word vectors and trained with the classifier loop on the task's rows, with the intermediate
task's texts shuffled in when the dataset's description names one. The ``cnn`` stage runs it; benchmarks too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from minibert.distributed import World
from minibert.textcnn import TextCNN, TextCNNConfig, bag_lr_scale, build_textcnn
from minibert.trainer import Tracker
from pipeline.classifier_loop import ClassifierLoop, train_classifier
from pipeline.params import CNNParams, TaskParams, TrainParams
from pipeline.scoring import Validation
from pipeline.splits import load_split, prepared
from pipeline.task import encode_train

EXTRA_MAX_LENGTH = 256  # tokens kept of each intermediate-task text, head and tail


def cnn_loop(cfg: CNNParams, shared: TrainParams) -> ClassifierLoop:
    """The classifier loop as the ``cnn`` and ``train`` sections set it (fp32, no seed techniques)."""
    return ClassifierLoop(section="cnn", seed=shared.seed, batch_size=cfg.batch_size, epochs=cfg.epochs,
                          time_budget_min=cfg.time_budget_min, optim=shared.optim(cfg.lr, cfg.warmup_ratio),
                          log_every=shared.log_every, eval_every=shared.eval_every, class_weights=shared.class_weights)


def extra_task(task: TaskParams) -> TaskParams:
    """How the intermediate task's texts are cut: one sequence of ``EXTRA_MAX_LENGTH``, head and tail."""
    return dataclasses.replace(task, max_length=EXTRA_MAX_LENGTH, stride=EXTRA_MAX_LENGTH - 2, truncation="head_tail")


def train_word_cnn(cfg: CNNParams, shared: TrainParams, vectors: torch.Tensor, rows: tuple[list[list[int]], np.ndarray],
                   val: Validation, tracker: Tracker, num_labels: int) -> tuple[TextCNN, TextCNNConfig, dict]:
    """A TextCNN from ``vectors`` (V, D) trained on ``rows``, the best of its validation passes."""
    torch.manual_seed(shared.seed)
    model_cfg = TextCNNConfig(vocab_size=vectors.shape[0], dim=vectors.shape[1], widths=tuple(cfg.widths),
                              filters=cfg.filters, dropout=cfg.dropout, num_labels=num_labels, bag_buckets=cfg.bag_buckets)
    model = build_textcnn(model_cfg, vectors).to(World().device())  # this process's GPU when there is one, as finetune
    model, metrics = train_classifier(model, cnn_loop(cfg, shared), rows, val, tracker, name="cnn", phase="cnn",
                                      lr_scale=bag_lr_scale(cfg.bag_lr_scale))
    return model, model_cfg, metrics


def with_extra(tok: Tokenizer, data: Path, task: TaskParams,
               rows: tuple[list[list[int]], np.ndarray]) -> tuple[tuple[list[list[int]], np.ndarray], int]:
    """The task's encoded training ``rows`` followed by the intermediate task's (cut by ``extra_task``), and how many of those."""
    if prepared(data).intermediate is None:
        return rows, 0
    other = extra_task(task)
    extra, extra_labels = encode_train(tok, load_split(data, "train", intermediate=True), other)
    return (rows[0] + extra, np.concatenate([rows[1], extra_labels])), len(extra)
