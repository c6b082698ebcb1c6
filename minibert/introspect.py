"""What a trained encoder attends to: attention maps and per-head statistics.

Follows the probing of Clark et al. 2019 ("What does BERT look at?"): for every layer and head,
the mean attention mass a query token puts on the next token, the previous token, itself,
[CLS], [SEP], and on a chosen set of tokens (for a sentiment model: the sentiment words).
Pure tensor maths; tokenizing, choosing the word set and drawing live in the pipeline.

Shape legend: B sentences, L layers, H heads, T tokens (queries and keys).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from minibert.model import Backbone


def _backbone(model: nn.Module) -> Backbone:
    if isinstance(model, Backbone):
        return model
    backbone = getattr(model, "backbone", None)
    if not isinstance(backbone, Backbone):
        raise TypeError(f"{type(model).__name__} has no minibert Backbone (expected a Backbone, MaskedLM or SequenceClassifier)")
    return backbone


@torch.no_grad()
def attention_maps(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Attention probabilities of every layer and head: (B, L, H, T, T), rows summing to 1 over
    real keys. ``input_ids`` (B, T); the model runs in eval mode (no dropout) through the eager
    core, the only one that returns weights; its training flag is restored afterwards."""
    backbone = _backbone(model)
    was_training = backbone.training
    backbone.eval()
    try:
        device = next(backbone.parameters()).device
        mask = None if attention_mask is None else attention_mask.to(device)
        _, weights = backbone(input_ids.to(device), mask, need_weights=True)
    finally:
        backbone.train(was_training)
    return torch.stack([w.float().cpu() for w in weights], dim=1)  # (B, L, H, T, T)


def _mean_over_queries(mass: Tensor, valid: Tensor) -> Tensor:
    """mass (B, L, H, T) per query, valid (B, T) bool -> (L, H): every valid query weighs the same."""
    weights = valid.to(mass.dtype)[:, None, None, :]  # (B, 1, 1, T)
    return (mass * weights).sum(dim=(0, 3)) / weights.sum(dim=(0, 3)).clamp_min(1.0)


def head_statistics(maps: Tensor, attention_mask: Tensor, targets: dict[str, Tensor]) -> dict[str, Tensor]:
    """Mean attention mass per (layer, head), averaged over the real query tokens of all sentences.

    maps (B, L, H, T, T); attention_mask (B, T), 1 for real tokens; ``targets`` {name: bool (B, T)}
    marks key tokens (e.g. [CLS], [SEP], sentiment words). Returns {name: (L, H)} with
    ``next_token``, ``previous_token`` and ``self`` added; a target counts only the sentences
    where it marks at least one token (the others have nothing to attend to).
    """
    real = attention_mask.bool()  # (B, T)
    out: dict[str, Tensor] = {}
    for name, offset in (("next_token", 1), ("previous_token", -1), ("self", 0)):
        diagonal = torch.diagonal(maps, offset=offset, dim1=-2, dim2=-1)  # (B, L, H, T - |offset|)
        t = maps.shape[-1]
        query = torch.arange(t - abs(offset)) + max(-offset, 0)  # query index of each diagonal entry
        valid = real[:, query] & real[:, query + offset]  # (B, T - |offset|): the neighbour exists and is real
        out[name] = _mean_over_queries(diagonal, valid)
    for name, marked in targets.items():
        marked = marked.bool() & real
        mass = (maps * marked[:, None, None, None, :].to(maps.dtype)).sum(-1)  # (B, L, H, T): mass on marked keys
        has_any = marked.any(dim=1, keepdim=True)  # (B, 1)
        out[name] = _mean_over_queries(mass, real & has_any)
    return out
