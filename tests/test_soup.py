"""A uniform model soup (minibert.soup): the element-wise mean of members' weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minibert.soup import soup_of, uniform_soup


def test_a_soup_of_linear_models_predicts_the_mean_of_their_predictions() -> None:
    torch.manual_seed(0)
    members = [nn.Linear(5, 3) for _ in range(3)]
    x = torch.randn(8, 5)
    expected = torch.stack([m(x) for m in members]).mean(0).detach()
    weights = [m.weight.detach().clone() for m in members]
    soup = soup_of(members)
    assert soup is members[0]
    torch.testing.assert_close(soup.weight.detach(), torch.stack(weights).mean(0))
    torch.testing.assert_close(soup(x).detach(), expected)  # linear in its weights: the mean of the outputs


def test_dtypes_and_trainable_flags_are_kept_and_equal_integer_buffers_pass() -> None:
    members = []
    for value in (1.0, 3.0):
        m = nn.Embedding(4, 2).to(torch.float64)
        nn.init.constant_(m.weight, value)
        m.weight.requires_grad_(False)
        m.register_buffer("steps", torch.tensor([7]))
        members.append(m)
    soup = soup_of(members)
    assert soup.weight.dtype == torch.float64 and not soup.weight.requires_grad
    assert torch.all(soup.weight == 2.0) and soup.steps.item() == 7


def test_members_that_are_not_copies_of_one_model_are_refused() -> None:
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.register_buffer("steps", torch.tensor([1]))
    with pytest.raises(ValueError, match=r"member 1 has other tensors than member 0: \['steps'\]"):
        uniform_soup([a.state_dict(), b.state_dict()])
    a.register_buffer("steps", torch.tensor([2]))
    with pytest.raises(ValueError, match="steps: a non-floating tensor differs"):
        uniform_soup([a.state_dict(), b.state_dict()])
    with pytest.raises(ValueError, match="at least one member"):
        uniform_soup([])
