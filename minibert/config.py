"""Model configuration: frozen, typed, validated once when made; named presets beside it.

Presets follow the BERT miniatures of Turc et al. 2019 (tiny, mini, small) and BERT-base.
Every string choice names a key of the dispatch dict that implements it, and is checked here,
so a bad value fails at config time with the key and the valid names, never deep in a forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minibert.choices import ACTIVATIONS, ATTENTION, NORM_STYLES, POOLING, POSITIONS
from minibert.validation import ConfigError, check_choice, check_types, from_dict


def _check_range(value: float, key: str, low: float, high: float | None = None, high_open: bool = False) -> None:
    if value < low or (high is not None and (value >= high if high_open else value > high)):
        bound = f"[{low}, {high})" if high_open else f">= {low}" if high is None else f"[{low}, {high}]"
        raise ConfigError(f"{key}: {value!r} is out of range; expected {bound}")


@dataclass(frozen=True)
class ModelConfig:
    """The encoder's shape and choices; heads take their own config (``ClassifierConfig``)."""

    vocab_size: int = 8000  # must equal the tokenizer's vocabulary size
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4  # hidden_size must divide by it
    intermediate_size: int = 1024  # feed-forward width; BERT uses 4 x hidden_size
    max_positions: int = 512  # longest sequence the position table / rotary cache covers
    type_vocab_size: int = 2  # segment ids (sentence A / B)
    hidden_dropout: float = 0.1  # on embeddings and on each sublayer output
    attention_dropout: float = 0.1  # on attention probabilities
    layer_norm_eps: float = 1e-12  # BERT's value
    activation: str = "gelu"  # key of layers.ACTIVATIONS; "gelu" is the exact erf form
    norm_style: str = "post"  # key of layers.NORM_STYLES: "post" (BERT) or "pre"
    position: str = "learned"  # key of positional.POSITIONS: learned, sinusoidal, rotary
    rope_base: float = 10000.0  # rotary frequency base; used only when position == "rotary"
    attention: str = "sdpa"  # key of attention.ATTENTION; eager is used anyway when weights are asked for
    pad_token_id: int = 0  # id of [PAD]; its embedding row starts at zero
    initializer_range: float = 0.02  # std of the normal initialisation, as BERT

    def __post_init__(self) -> None:
        check_types(self)
        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_positions", "type_vocab_size"):
            _check_range(getattr(self, key), key, 1)
        for key in ("hidden_dropout", "attention_dropout"):
            _check_range(getattr(self, key), key, 0.0, 1.0, high_open=True)
        for key in ("layer_norm_eps", "rope_base", "initializer_range"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}: {getattr(self, key)!r} must be > 0")
        _check_range(self.pad_token_id, "pad_token_id", 0, self.vocab_size - 1)
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"hidden_size: {self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                f"pick a hidden_size that is a multiple of num_heads"
            )
        check_choice(self.activation, ACTIVATIONS, "activation")
        check_choice(self.norm_style, NORM_STYLES, "norm_style")
        check_choice(self.position, POSITIONS, "position")
        check_choice(self.attention, ATTENTION, "attention")
        if self.position == "rotary" and self.head_size % 2:
            raise ConfigError(f"position: 'rotary' needs an even head size, got {self.head_size}")
        if self.position == "sinusoidal" and self.hidden_size % 2:
            raise ConfigError(f"position: 'sinusoidal' needs an even hidden_size, got {self.hidden_size}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> ModelConfig:
        """Build from a plain dict; a ``preset`` key starts from that preset, others override it."""
        data = dict(data)
        preset = data.pop("preset", None)
        if preset is not None:
            check_choice(preset, PRESETS, f"{where}.preset" if where else "preset")
            data = {**dataclasses.asdict(PRESETS[preset]), **data}
        return from_dict(cls, data, where)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named preset (tiny, mini, small, base) with optional field overrides."""
        return cls.from_dict({"preset": name, **overrides})


@dataclass(frozen=True)
class ClassifierConfig:
    """The sequence-classification head."""

    num_labels: int = 2
    pooling: str = "cls"  # key of heads.POOLING: cls (BERT), mean or max over real tokens
    dropout: float = 0.1  # before the final linear layer

    def __post_init__(self) -> None:
        check_types(self)
        _check_range(self.num_labels, "num_labels", 1)
        _check_range(self.dropout, "dropout", 0.0, 1.0, high_open=True)
        check_choice(self.pooling, POOLING, "pooling")


PRESETS: dict[str, ModelConfig] = {
    "nano": ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=128),  # smoke runs, tests
    "tiny": ModelConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512),
    "mini": ModelConfig(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024),
    "small": ModelConfig(hidden_size=512, num_layers=4, num_heads=8, intermediate_size=2048),
    "base": ModelConfig(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072),
}
