"""Training losses as pure functions of logits and targets.

References: MLM cross-entropy over selected positions (Devlin et al. 2018); knowledge
distillation (Hinton et al. 2015): alpha * T^2 * KL(softmax(t/T) || softmax(s/T)) +
(1 - alpha) * CE(s, y); the T^2 keeps the soft-target gradients on the same scale as T changes.
TinyBERT-style intermediate terms (Jiao et al. 2020): hidden-state MSE and, departing from its
per-head score MSE, KL between head-averaged attention distributions (``minibert.distill``).

Shape legend: B batch, T sequence length, C hidden size, H heads, N masked tokens, V vocabulary,
L labels.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from minibert.masking import IGNORE_INDEX


def mlm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy; logits (N, V) with labels (N,), or (B, T, V) with (B, T) using IGNORE_INDEX.

    A batch with no masked token (a few short sentences can draw none) gives 0, not the NaN of a
    mean over nothing; the count stays on the device (no host sync)."""
    labels = labels.reshape(-1)
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (labels != IGNORE_INDEX).sum().clamp_min(1)


def kd_loss(student_logits: Tensor, teacher_logits: Tensor, labels: Tensor, temperature: float, alpha: float,
            weight: Tensor | None = None) -> Tensor:
    """Hinton distillation loss; logits (B, L), labels (B,). alpha weighs the soft term; ``weight`` (L,), the
    classes in the hard-label term (balanced class weights)."""
    if temperature <= 0 or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"need temperature > 0 and alpha in [0, 1], got {temperature}, {alpha}")
    soft = F.kl_div(
        F.log_softmax(student_logits.float() / temperature, dim=-1),
        F.log_softmax(teacher_logits.float() / temperature, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    hard = F.cross_entropy(student_logits.float(), labels, weight=weight)
    return alpha * temperature**2 * soft + (1.0 - alpha) * hard


def hidden_mse(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """Mean squared error between (B, T, C) hidden states over the real tokens of bool ``mask`` (B, T)."""
    squared = (student.float() - teacher.float()).square().mean(dim=-1)  # (B, T)
    return (squared * mask).sum() / mask.sum().clamp(min=1)


def attention_kl(student: Tensor, teacher: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """KL(teacher || student) of head-averaged attention rows, (B, H, T, T) each (head counts may
    differ), averaged over the real query positions of bool ``mask`` (B, T)."""
    s, t = student.float().mean(dim=1), teacher.float().mean(dim=1)  # (B, T, T)
    kl = (t * ((t + eps).log() - (s + eps).log())).sum(dim=-1)  # (B, T)
    return (kl * mask).sum() / mask.sum().clamp(min=1)
