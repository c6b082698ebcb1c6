"""Knowledge distillation: student initialisation and the student-with-projections module.

References: DistilBERT (Sanh et al. 2019) initialises its student from the teacher by taking
one layer out of two; we generalise to evenly spaced teacher layers. TinyBERT (Jiao et al.
2020) adds intermediate losses: each student layer's hidden states, mapped to the teacher's
width by a learned linear projection, regress onto its mapped teacher layer's (MSE), and its
attention distributions onto the teacher's. Departures:

1. A student narrower than the teacher cannot take the teacher's layers; its token, segment
   and position embeddings start as the teacher's projected onto the top principal directions
   of the teacher's word embeddings (one basis for all three, so their sums stay consistent).
2. The attention term compares head-averaged distributions with KL(teacher || student) at real
   query positions, so student and teacher may have different head counts (TinyBERT takes
   MSE between per-head scores and needs equal heads).
3. Teacher logits are computed once, outside (``pipeline/stages/teacher_logits.py``); the
   teacher's layers are run online only when an intermediate loss is on.

Shape legend: B batch, T sequence length, C hidden size, H heads, L labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from minibert.losses import attention_kl, hidden_mse, kd_loss
from minibert.model import SequenceClassifier


def spaced_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Evenly spaced teacher layer indices, ending with the last one: 4 -> 2 gives [1, 3]."""
    if not 0 < student_layers <= teacher_layers:
        raise ValueError(f"student layers {student_layers} must be in 1..{teacher_layers}")
    step = teacher_layers / student_layers
    return [int(round(step * (i + 1))) - 1 for i in range(student_layers)]


def principal_basis(weight: Tensor, width: int) -> Tensor:
    """(C_t, width) orthonormal columns: the top principal directions of the rows of ``weight``."""
    if not 0 < width <= min(weight.shape):
        raise ValueError(f"width {width} must be in 1..{min(weight.shape)} for a {tuple(weight.shape)} matrix")
    centered = weight.double() - weight.double().mean(dim=0)
    _, _, vh = torch.linalg.svd(centered, full_matrices=False)
    return vh[:width].T.to(weight.dtype)


def _project_embeddings(student: SequenceClassifier, teacher: SequenceClassifier) -> list[str]:
    """Departure 1: the student's embedding tables from the teacher's, through one shared basis."""
    s_emb, t_emb = student.backbone.embeddings, teacher.backbone.embeddings
    basis = principal_basis(t_emb.tokens.weight.detach(), s_emb.tokens.weight.shape[1])  # (C_t, C_s)
    pairs = [("backbone.embeddings.tokens.weight", s_emb.tokens.weight, t_emb.tokens.weight),
             ("backbone.embeddings.segments.weight", s_emb.segments.weight, t_emb.segments.weight)]
    s_pos, t_pos = getattr(s_emb.positions, "table", None), getattr(t_emb.positions, "table", None)
    if isinstance(s_pos, nn.Embedding) and isinstance(t_pos, nn.Embedding):
        pairs.append(("backbone.embeddings.positions.table.weight", s_pos.weight, t_pos.weight))
    copied = []
    with torch.no_grad():
        for name, mine, theirs in pairs:
            if name.endswith("tokens.weight") and theirs.shape[0] != mine.shape[0]:
                continue  # vocabularies differ: rows do not name the same tokens
            rows = min(mine.shape[0], theirs.shape[0])  # position tables may differ in length
            mine[:rows] = theirs[:rows] @ basis
            copied.append(name)
    return copied


def init_student_from_teacher(student: SequenceClassifier, teacher: SequenceClassifier) -> list[str]:
    """Start the student from the teacher: returns the student parameter names that were set.

    Same width: embeddings, evenly spaced layers and the head are copied where shapes match.
    Narrower: the embeddings are projected (departure 1); layers keep their fresh init.
    Wider: nothing is taken.
    """
    s_state, t_state = student.state_dict(), teacher.state_dict()
    s_width = student.backbone.embeddings.tokens.weight.shape[1]
    t_width = teacher.backbone.embeddings.tokens.weight.shape[1]
    if s_width < t_width:
        return _project_embeddings(student, teacher)
    if s_width > t_width:
        return []
    layer_map = spaced_layers(len(teacher.backbone.encoder.layers), len(student.backbone.encoder.layers))
    copied = []
    with torch.no_grad():
        for name, value in s_state.items():
            source = name
            if name.startswith("backbone.encoder.layers."):
                parts = name.split(".")
                parts[3] = str(layer_map[int(parts[3])])
                source = ".".join(parts)
            if source in t_state and t_state[source].shape == value.shape:
                value.copy_(t_state[source])
                copied.append(name)
    return copied


@contextmanager
def layer_outputs(model: SequenceClassifier) -> Iterator[list[Tensor]]:
    """Collect each encoder layer's output hidden states (B, T, C), in order, while the block runs."""
    outputs: list[Tensor] = []
    handles = [layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0]))
               for layer in model.backbone.encoder.layers]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def forward_with_internals(
    model: SequenceClassifier, ids: Tensor, mask: Tensor, need_weights: bool
) -> tuple[Tensor, list[Tensor], tuple[Tensor, ...]]:
    """Logits (B, L), each layer's hidden states (B, T, C) and, if asked, attention (B, H, T, T)."""
    with layer_outputs(model) as hidden_states:
        hidden, weights = model.backbone(ids, mask, need_weights=need_weights)
    return model.head(hidden, mask.bool()), hidden_states, weights


class Distiller(nn.Module):
    """The student, plus (for the hidden-state loss) one projection a student layer to the teacher's width.

    ``forward`` is the student's, so validation and export see the student; ``loss`` is the
    training objective. The teacher is held outside the module's parameters and state.
    """

    def __init__(self, student: SequenceClassifier, teacher: SequenceClassifier, hidden_weight: float = 0.0,
                 attention_weight: float = 0.0) -> None:
        super().__init__()
        if hidden_weight < 0 or attention_weight < 0:
            raise ValueError(f"loss weights must be >= 0, got hidden {hidden_weight}, attention {attention_weight}")
        self.student = student
        self.hidden_weight, self.attention_weight = hidden_weight, attention_weight
        s_layers, t_layers = len(student.backbone.encoder.layers), len(teacher.backbone.encoder.layers)
        self.layer_map = spaced_layers(t_layers, s_layers) if hidden_weight or attention_weight else []
        s_width = student.backbone.embeddings.tokens.weight.shape[1]
        t_width = teacher.backbone.embeddings.tokens.weight.shape[1]
        self.projections = nn.ModuleList(nn.Linear(s_width, t_width) for _ in range(s_layers) if hidden_weight > 0)
        # A tuple keeps the teacher out of parameters(), state_dict() and .to(): it must already
        # sit on the student's device.
        self._teacher = (teacher.eval(),)

    @property
    def backbone(self) -> nn.Module:
        return self.student.backbone  # the training loop reads the layer count here

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.student(input_ids, attention_mask)

    def loss(self, ids: Tensor, mask: Tensor, labels: Tensor, teacher_logits: Tensor, temperature: float,
             alpha: float, weight: Tensor | None = None) -> Tensor:
        """KD on the cached teacher logits (``weight``: the classes' in its label term), plus the weighted
        intermediate terms that are on."""
        if not (self.hidden_weight or self.attention_weight):
            return kd_loss(self.student(ids, mask), teacher_logits, labels, temperature, alpha, weight)
        need_weights = self.attention_weight > 0
        logits, s_hidden, s_weights = forward_with_internals(self.student, ids, mask, need_weights)
        with torch.no_grad():
            _, t_hidden, t_weights = forward_with_internals(self._teacher[0], ids, mask, need_weights)
        loss = kd_loss(logits, teacher_logits, labels, temperature, alpha, weight)
        real = mask.bool()
        for i, t in enumerate(self.layer_map):
            if self.hidden_weight:
                loss = loss + self.hidden_weight * hidden_mse(self.projections[i](s_hidden[i]), t_hidden[t], real)
            if self.attention_weight:
                loss = loss + self.attention_weight * attention_kl(s_weights[i], t_weights[t], real)
        return loss


class LogitDistiller(nn.Module):
    """Any classifier ``(ids, mask) -> logits`` as a student of cached soft targets (no teacher in memory):
    ``forward`` is the student's, ``loss`` the KD objective on its logits alone. For students with no
    layers to match the teacher's, such as the word-level CNN (Tang et al. 2019 distil BERT into a BiLSTM)."""

    def __init__(self, student: nn.Module) -> None:
        super().__init__()
        self.student = student

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.student(input_ids, attention_mask)

    def loss(self, ids: Tensor, mask: Tensor, labels: Tensor, teacher_logits: Tensor, temperature: float,
             alpha: float, weight: Tensor | None = None) -> Tensor:
        return kd_loss(self.student(ids, mask), teacher_logits, labels, temperature, alpha, weight)
