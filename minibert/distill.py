"""Student initialisation for knowledge distillation.

Reference: DistilBERT (Sanh et al. 2019) initialises its student from the teacher by taking
one layer out of two; we generalise to evenly spaced teacher layers. Weights are copied only
where shapes match (same hidden and feed-forward sizes); otherwise the student keeps its fresh
initialisation and the copy reports nothing taken. The loss itself is ``losses.kd_loss``.
"""

from __future__ import annotations

import torch

from minibert.model import SequenceClassifier


def spaced_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Evenly spaced teacher layer indices, ending with the last one: 4 -> 2 gives [1, 3]."""
    if not 0 < student_layers <= teacher_layers:
        raise ValueError(f"student layers {student_layers} must be in 1..{teacher_layers}")
    step = teacher_layers / student_layers
    return [int(round(step * (i + 1))) - 1 for i in range(student_layers)]


def init_student_from_teacher(student: SequenceClassifier, teacher: SequenceClassifier) -> list[str]:
    """Copy embeddings, spaced layers and the head from teacher to student where shapes match.

    Returns the student parameter names that were copied (empty if the widths differ).
    """
    s_state, t_state = student.state_dict(), teacher.state_dict()
    width = "backbone.embeddings.tokens.weight"
    if s_state[width].shape != t_state[width].shape:
        return []  # a narrower student shares no tensor shape worth copying
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
