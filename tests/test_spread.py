"""token_deviation: the collapse check sums squared deviations from each sequence's mean over real tokens only."""

import pytest
import torch

from minibert.spread import token_deviation


def test_identical_states_have_no_spread_and_padding_is_ignored() -> None:
    hidden = torch.ones(2, 4, 3) * torch.tensor([1.0, -2.0, 0.5])
    hidden[1, 3] = 100.0  # a padded position: must not count
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    squared, cells = token_deviation(hidden, mask)
    assert squared == 0.0 and cells == 7 * 3


def test_spread_matches_the_formula_and_batches_add_up() -> None:
    torch.manual_seed(0)
    hidden, mask = torch.randn(3, 5, 4), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    expected, cells = 0.0, 0
    for b in range(3):
        real = hidden[b, : int(mask[b].sum())]
        expected += float(((real - real.mean(0)) ** 2).sum())
        cells += real.numel()
    squared, got_cells = token_deviation(hidden, mask)
    assert squared == pytest.approx(expected, rel=1e-5) and got_cells == cells
    parts = [token_deviation(hidden[i : i + 1], mask[i : i + 1]) for i in range(3)]
    assert sum(p[0] for p in parts) == pytest.approx(squared, rel=1e-5) and sum(p[1] for p in parts) == cells
    assert token_deviation(hidden[2:], mask[2:])[0] == 0.0  # one real token: nothing to deviate from
