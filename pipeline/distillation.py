"""Distillation: a student trained on soft targets (Hinton et al. 2015 KD loss) with the classifier loop.

A transformer student (``distill_transformer``) starts from the teacher's layers
(``minibert.distill.init_student_from_teacher``) and learns alpha * T^2 * KL(targets || student)
+ (1 - alpha) * CE, plus TinyBERT-style hidden-state and attention terms when their weights are
above 0. A word-CNN student (``run_word_cnn``) is the ``cnn`` stage's model trained on further with
the same loss; ``run_soup`` averages the weights of several such students of successive seeds
(``minibert.soup``). What they learn is the ``soft_targets`` stage's mix (``pipeline.soft_targets``).
The ``distill`` stage runs these; benchmarks too.
"""

from __future__ import annotations

import copy
import dataclasses
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from minibert.config import ClassifierConfig, ModelConfig
from minibert.distill import Distiller, LogitDistiller, init_student_from_teacher
from minibert.model import SequenceClassifier, build_classifier, parameter_counts
from minibert.soup import soup_of
from minibert.textcnn import TextCNN, TextCNNConfig, bag_lr_scale, load_textcnn
from minibert.trainer import Tracker
from pipeline.classifier_loop import ClassifierLoop, PrefixedTracker, class_weight, train_classifier
from pipeline.deadline import budget_s, record_trained
from pipeline.metrics import classification_metrics
from pipeline.params import DistillParams, TrainParams
from pipeline.scoring import Validation


def distill_transformer(
    cfg: DistillParams, shared: TrainParams, teacher: SequenceClassifier, head_cfg: ClassifierConfig, student_cfg: ModelConfig,
    train: tuple[list[list[int]], np.ndarray], teacher_logits: np.ndarray, val: Validation, tracker: Tracker,
) -> tuple[SequenceClassifier, dict]:
    torch.manual_seed(shared.seed)
    student = build_classifier(student_cfg, head_cfg)
    copied = init_student_from_teacher(student, teacher)
    distiller = Distiller(student, teacher, cfg.hidden_weight, cfg.attention_weight)

    # Reuse the fine-tuning loop with a KD step: labels travel with the teacher's logits.
    distiller, metrics = train_classifier(
        distiller, loop_config(cfg, shared, len(train[0])), (train[0], kd_targets(train[1], teacher_logits)), val, tracker, name="distill",
        step=partial(kd_step, temperature=cfg.temperature, alpha=cfg.alpha, weight=label_weight(shared, train[1], teacher_logits)),
        phase="distill",
    )
    student = distiller.student.eval()
    (_, teacher_non_embedding), (student_total, student_non_embedding) = parameter_counts(teacher), parameter_counts(student)
    metrics.update({
        "student_params": student_total,
        "student_non_embedding_params": student_non_embedding,
        "non_embedding_ratio": student_non_embedding / teacher_non_embedding,
        "tensors_from_teacher": len(copied),
    })
    return student, metrics


def run_word_cnn(cfg: DistillParams, shared: TrainParams, student: TextCNN, train: tuple[list[list[int]], np.ndarray],
                 targets: np.ndarray, val: Validation, tracker: Tracker, bag_lr: float = 1.0,
                 phase: str | None = "distill") -> tuple[TextCNN, dict]:
    """``distill.student_kind: word_cnn``: the cnn stage's ``student`` trained on further on the soft targets
    (its own logits among them at ``soft_targets.word_cnn``), with the KD loss, loop and selection of ``distill_transformer``;
    its n-gram bag, if any, at ``bag_lr`` times the learning rate (``cnn.bag_lr_scale``). ``phase``: the
    deadline's loop (None: ``cfg.time_budget_min`` as it is, a soup member's share)."""
    torch.manual_seed(shared.seed)
    distiller, metrics = train_classifier(
        LogitDistiller(student.train()), loop_config(cfg, shared, len(train[0])), (train[0], kd_targets(train[1], targets)), val,
        tracker, name="distill", phase=phase,
        step=partial(kd_step, temperature=cfg.temperature, alpha=cfg.alpha, weight=label_weight(shared, train[1], targets)),
        lr_scale=bag_lr_scale(bag_lr),
    )
    student = distiller.student.eval()
    total, non_embedding = parameter_counts(student)
    metrics.update({"student_params": total, "student_non_embedding_params": non_embedding})
    return student, metrics


def run_soup(cfg: DistillParams, shared: TrainParams, cnn_model: Path, train: tuple[list[list[int]], np.ndarray],
             targets: np.ndarray, val: Validation, tracker: Tracker, bag_lr: float = 1.0,
             others_tracker: Tracker | None = None) -> tuple[TextCNN, TextCNNConfig, dict]:
    """``distill.soup`` word-CNN students, each from ``cnn_model`` with seed ``shared.seed + i`` (its data order and
    dropout), their weights averaged (``minibert.soup``). The deadline gives the soup one budget (each member's
    cap times ``soup``), shared evenly; member 0 logs to ``tracker`` as a lone student would (the curves), member
    i to ``others_tracker`` (default ``tracker``) with ``soup{i}_`` names.
    Metrics: the soup's validation, each member's, and the members' training seconds summed."""
    cnn, cnn_cfg = load_textcnn(cnn_model)
    if cfg.soup == 1:
        student, metrics = run_word_cnn(cfg, shared, cnn, train, targets, val, tracker, bag_lr)
        return student, cnn_cfg, metrics
    budget, budget_metrics = budget_s("distill", None if cfg.time_budget_min is None else cfg.time_budget_min * cfg.soup)
    each = dataclasses.replace(cfg, time_budget_min=None if budget is None else budget / 60.0 / cfg.soup)
    initial = copy.deepcopy(cnn)  # each member trains its own copy in place: read the file once
    members, runs = [], []
    for i in range(cfg.soup):
        start = cnn if i == 0 else copy.deepcopy(initial)
        student, metrics = run_word_cnn(each, dataclasses.replace(shared, seed=shared.seed + i), start, train, targets, val,
                                        tracker if i == 0 else PrefixedTracker(others_tracker or tracker, f"soup{i}_"), bag_lr,
                                        phase=None)
        members.append(student)
        runs.append(metrics)
    soup = soup_of(members).eval()
    trained = sum(m["train_seconds"] for m in runs)
    record_trained("distill", trained)  # the members trained outside the plan's loops
    scored = classification_metrics(val.labels, val.logits(soup))
    metrics = {**runs[0], **budget_metrics, "soup": cfg.soup, "val_accuracy": scored["accuracy"], "val_macro_f1": scored["macro_f1"],
               "soup_member_val_accuracy": [m["val_accuracy"] for m in runs], "train_seconds": trained,
               "stopped_by_budget": any(m["stopped_by_budget"] for m in runs)}
    return soup, cnn_cfg, metrics


def loop_config(cfg: DistillParams, shared: TrainParams, rows: int) -> ClassifierLoop:
    """The classifier loop as the ``distill`` and ``train`` sections set it (fp32, no seed techniques); validation
    twice an epoch."""
    return ClassifierLoop(section="distill", seed=shared.seed, batch_size=cfg.batch_size, epochs=cfg.epochs,
                          time_budget_min=cfg.time_budget_min, optim=shared.optim(cfg.lr, cfg.warmup_ratio),
                          log_every=shared.log_every,
                          eval_every=max(1, rows // cfg.batch_size // 2))


def kd_targets(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """(N, 1 + L) rows that travel through the loop as labels do: the label, then the soft-target logits."""
    return np.concatenate([labels[:, None].astype(np.float32), logits], axis=1)


def with_transfer(train: tuple[list[list[int]], np.ndarray], targets: np.ndarray,
                  transfer: list[list[int]], transfer_targets: np.ndarray) -> tuple[tuple[list[list[int]], np.ndarray], np.ndarray]:
    """The training rows followed by the transfer set's, whose labels are their soft targets' argmax
    (the hard-label term of the KD loss then follows the teacher, or the ensemble, on them)."""
    labels = np.concatenate([train[1], transfer_targets.argmax(axis=1)]) if len(transfer) else train[1]
    return (train[0] + transfer, labels), np.concatenate([targets, transfer_targets]).astype(np.float32)


def label_weight(shared: TrainParams, labels: np.ndarray, targets: np.ndarray) -> Tensor | None:
    """``train.class_weights`` over the rows' hard labels (the transfer set's are its soft targets' argmax)."""
    return class_weight(shared.class_weights, labels, targets.shape[1])


def kd_step(model: Distiller, batch: tuple[Tensor, ...], temperature: float, alpha: float,
            weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    ids, mask, targets = batch  # targets: (B, 1 + L) = label, then teacher logits
    return model.loss(ids, mask, targets[:, 0].long(), targets[:, 1:], temperature, alpha,
                      None if weight is None else weight.to(targets.device)), mask.sum()
