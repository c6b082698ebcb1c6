import dataclasses

import pytest

from minibert import PRESETS, ClassifierConfig, ConfigError, ModelConfig


@pytest.mark.parametrize(
    "name, layers, hidden, heads",
    [("tiny", 2, 128, 2), ("mini", 4, 256, 4), ("small", 4, 512, 8), ("base", 12, 768, 12)],
)
def test_presets_have_the_published_shapes(name: str, layers: int, hidden: int, heads: int) -> None:
    cfg = PRESETS[name]
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads) == (layers, hidden, heads)
    assert cfg.intermediate_size == 4 * hidden


def test_preset_with_overrides() -> None:
    cfg = ModelConfig.from_dict({"preset": "mini", "vocab_size": 16000, "position": "rotary"})
    assert (cfg.hidden_size, cfg.vocab_size, cfg.position) == (256, 16000, "rotary")


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'hiden_size'.*did you mean 'hidden_size'"):
        ModelConfig.from_dict({"hiden_size": 128})


def test_unknown_key_in_a_section_carries_the_path() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'model.dropout'"):
        ModelConfig.from_dict({"dropout": 0.1}, where="model")


@pytest.mark.parametrize(
    "key, value, expected",
    [("num_layers", "4", "num_layers: expected an integer"), ("num_layers", 4.0, "num_layers: expected an integer"),
     ("num_layers", True, "num_layers: expected an integer"), ("hidden_dropout", "0.1", "hidden_dropout: expected a number"),
     ("position", 3, "position: expected str")],
)
def test_wrong_type_names_the_key(key: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        ModelConfig.from_dict({key: value})


def test_int_is_accepted_where_a_float_is_expected() -> None:
    cfg = ModelConfig.from_dict({"rope_base": 500})
    assert cfg.rope_base == 500.0 and isinstance(cfg.rope_base, float)


def test_hidden_size_must_divide_by_heads() -> None:
    with pytest.raises(ConfigError, match=r"hidden_size: 130 is not divisible by num_heads=4"):
        ModelConfig(hidden_size=130, num_heads=4)


@pytest.mark.parametrize("key, value", [("attention", "flash"), ("position", "alibi"), ("norm_style", "sandwich"), ("activation", "swish")])
def test_unknown_choice_lists_the_valid_ones(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}: '{value}' is not one of \["):
        ModelConfig.from_dict({key: value})


def test_unknown_preset_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"preset: 'huge' is not one of \['nano', 'tiny', 'mini', 'small', 'base'\]"):
        ModelConfig.preset("huge")


def test_ranges_are_checked() -> None:
    with pytest.raises(ConfigError, match="hidden_dropout: 1.5 is out of range"):
        ModelConfig(hidden_dropout=1.5)
    with pytest.raises(ConfigError, match="num_layers: 0 is out of range"):
        ModelConfig(num_layers=0)
    with pytest.raises(ConfigError, match="pad_token_id: 9000 is out of range"):
        ModelConfig(pad_token_id=9000)


def test_rotary_needs_an_even_head_size() -> None:
    with pytest.raises(ConfigError, match="rotary.*even head size"):
        ModelConfig(hidden_size=9, num_heads=3, position="rotary")


def test_configs_are_frozen() -> None:
    cfg = ModelConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.hidden_size = 3  # type: ignore[misc]


def test_classifier_config_validation() -> None:
    assert ClassifierConfig(pooling="mean").pooling == "mean"
    with pytest.raises(ConfigError, match=r"pooling: 'attention' is not one of \['cls', 'mean', 'max'\]"):
        ClassifierConfig(pooling="attention")
    with pytest.raises(ConfigError, match="num_labels: 0 is out of range"):
        ClassifierConfig(num_labels=0)
