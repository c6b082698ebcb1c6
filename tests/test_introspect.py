"""Attention maps out of a trained encoder, and the per-head statistics computed from them."""

from __future__ import annotations

import pytest
import torch

from minibert import ClassifierConfig, ModelConfig, build_classifier
from minibert.introspect import attention_maps, head_statistics


def classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_classifier(ModelConfig.preset("tiny", vocab_size=50, max_positions=16, attention="sdpa"),
                            ClassifierConfig()).train()


def test_maps_are_the_eager_weights_of_every_layer_and_sum_to_one_over_real_keys() -> None:
    model = classifier()
    ids = torch.randint(5, 50, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    maps = attention_maps(model, ids, mask)
    layers, heads = len(model.backbone.encoder.layers), model.backbone.encoder.layers[0].attention.num_heads
    assert maps.shape == (2, layers, heads, 7, 7)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, layers, heads, 7))
    assert maps[1, ..., 4:].abs().max() < 1e-6, "padding gets no attention"
    assert model.training, "the caller's training flag is restored"
    model.eval()
    with torch.no_grad():
        _, weights = model.backbone(ids, mask, need_weights=True)
    torch.testing.assert_close(maps[:, 0], weights[0])
    torch.testing.assert_close(maps[:, -1], weights[-1])


def test_attention_maps_refuses_a_model_without_a_backbone() -> None:
    with pytest.raises(TypeError, match="no minibert Backbone"):
        attention_maps(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long))


def shift_maps(t: int, real: int) -> torch.Tensor:
    """(1, 2, 1, T, T): layer 0 looks at the next real token (the last at itself), layer 1 at [CLS]."""
    maps = torch.zeros(1, 2, 1, t, t)
    for i in range(real):
        maps[0, 0, 0, i, min(i + 1, real - 1)] = 1.0
        maps[0, 1, 0, i, 0] = 1.0
    return maps


def test_statistics_of_a_head_that_always_looks_at_the_next_token() -> None:
    t, real = 6, 5  # one padding position
    mask = torch.tensor([[1] * real + [0]])
    cls = torch.zeros(1, t, dtype=torch.bool)
    cls[0, 0] = True
    stats = head_statistics(shift_maps(t, real), mask, {"cls": cls})
    # next token: 4 queries have a real next token and put all their mass there
    assert stats["next_token"][0, 0] == pytest.approx(1.0)
    assert stats["previous_token"][0, 0] == pytest.approx(0.0)
    assert stats["self"][0, 0] == pytest.approx(1 / real), "only the last real query looks at itself"
    assert stats["cls"][1, 0] == pytest.approx(1.0) and stats["cls"][0, 0] == pytest.approx(0.0)
    assert stats["next_token"][1, 0] == pytest.approx(0.0), "[CLS] is nobody's next token"
    assert stats["previous_token"][1, 0] == pytest.approx(0.25), "[CLS] is the previous token of 1 of 4 queries"


def test_a_target_counts_only_sentences_that_contain_it() -> None:
    t = 4
    maps = torch.full((2, 1, 1, t, t), 1.0 / t)
    mask = torch.ones(2, t)
    words = torch.tensor([[False, True, False, False], [False, False, False, False]])
    stats = head_statistics(maps, mask, {"sentiment": words})
    assert stats["sentiment"][0, 0] == pytest.approx(1.0 / t), "the empty second sentence does not dilute the mean"
