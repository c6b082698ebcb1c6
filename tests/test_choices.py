"""Each name a config accepts has an implementation, and each implementation a name."""

import pytest

from minibert import choices
from minibert.attention import ATTENTION
from minibert.config import ClassifierConfig, ModelConfig
from minibert.heads import POOLING
from minibert.layers import ACTIVATIONS, NORM_STYLES
from minibert.positional import POSITIONS
from minibert.precision import PRECISIONS
from minibert.train_config import LoopConfig, OptimConfig
from minibert.trainer import SCHEDULES
from minibert.validation import ConfigError


@pytest.mark.parametrize(("names", "implemented"), [
    (choices.ATTENTION, ATTENTION), (choices.POOLING, POOLING), (choices.ACTIVATIONS, ACTIVATIONS),
    (choices.NORM_STYLES, NORM_STYLES), (choices.POSITIONS, POSITIONS), (choices.SCHEDULES, SCHEDULES),
    (choices.PRECISIONS, PRECISIONS),
], ids=["attention", "pooling", "activation", "norm_style", "position", "schedule", "precision"])
def test_the_names_a_config_accepts_are_the_keys_of_the_dispatch_dict(names: tuple[str, ...], implemented: dict) -> None:
    assert names == tuple(implemented)


@pytest.mark.parametrize(("make", "key"), [
    (lambda v: ModelConfig(attention=v), "attention"), (lambda v: ModelConfig(position=v), "position"),
    (lambda v: ModelConfig(norm_style=v), "norm_style"), (lambda v: ModelConfig(activation=v), "activation"),
    (lambda v: ClassifierConfig(pooling=v), "pooling"), (lambda v: OptimConfig(schedule=v), "schedule"),
    (lambda v: LoopConfig(max_steps=1, precision=v), "precision"),
])
def test_a_config_refuses_a_name_with_no_implementation(make, key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}: 'nope' is not one of"):
        make("nope")
