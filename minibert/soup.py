"""A uniform model soup (Wortsman et al. 2022, "Model soups: averaging weights of multiple
fine-tuned models improves accuracy without increasing inference time"): the element-wise mean
of the weights of models trained from one starting point.

Reference: the uniform soup averages every parameter of the fine-tuned models. Difference: buffers
that are not floating point (counters, ids) must be equal in every member and are kept, not
averaged. Averaging only makes sense for members that share their start, so that they sit in one
basin: here, word-CNN students trained on from the same checkpoint with different data orders.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def uniform_soup(states: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The element-wise mean of ``states`` (state dicts of one architecture), in each tensor's dtype;
    a non-floating tensor must be equal in all of them."""
    if not states:
        raise ValueError("a soup needs at least one member")
    keys = list(states[0])
    for i, state in enumerate(states[1:], start=1):
        if list(state) != keys:
            raise ValueError(f"member {i} has other tensors than member 0: {sorted(set(state) ^ set(keys))}")
    soup = {}
    for key in keys:
        tensors = [state[key] for state in states]
        if tensors[0].is_floating_point():
            soup[key] = torch.stack([t.float() for t in tensors]).mean(dim=0).to(tensors[0].dtype)
        elif all(torch.equal(t, tensors[0]) for t in tensors[1:]):
            soup[key] = tensors[0].clone()
        else:
            raise ValueError(f"{key}: a non-floating tensor differs between members; they are not one model's copies")
    return soup


def soup_of(models: Sequence[nn.Module]) -> nn.Module:
    """``models[0]`` with the uniform soup of all of them loaded into it (trainable flags kept)."""
    models[0].load_state_dict(uniform_soup([m.state_dict() for m in models]))
    return models[0]
