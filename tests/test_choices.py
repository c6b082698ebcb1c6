"""Each name a config accepts has an implementation, and each implementation a name."""

import pytest

from minibert import choices
from minibert.attention import ATTENTION
from minibert.heads import POOLING
from minibert.layers import ACTIVATIONS, NORM_STYLES
from minibert.positional import POSITIONS
from minibert.precision import PRECISIONS
from minibert.trainer import SCHEDULES


@pytest.mark.parametrize(("names", "implemented"), [
    (choices.ATTENTION, ATTENTION), (choices.POOLING, POOLING), (choices.ACTIVATIONS, ACTIVATIONS),
    (choices.NORM_STYLES, NORM_STYLES), (choices.POSITIONS, POSITIONS), (choices.SCHEDULES, SCHEDULES),
    (choices.PRECISIONS, PRECISIONS),
], ids=["attention", "pooling", "activation", "norm_style", "position", "schedule", "precision"])
def test_the_names_a_config_accepts_are_the_keys_of_the_dispatch_dict(names: tuple[str, ...], implemented: dict) -> None:
    assert names == tuple(implemented)
