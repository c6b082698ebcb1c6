"""Our self-attention against torch.nn.MultiheadAttention with copied weights, and eager vs SDPA."""

import pytest
import torch
from torch import nn

from minibert.attention import ATTENTION, SelfAttention, eager_attention, sdpa_attention
from minibert.model import key_mask

B, T, C, H = 3, 9, 32, 4
TOL = dict(atol=1e-6, rtol=1e-5)


def copied_pair(core: str) -> tuple[SelfAttention, nn.MultiheadAttention]:
    reference = nn.MultiheadAttention(C, H, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        reference.in_proj_bias.normal_()  # non-zero biases, so a bias mix-up shows
        reference.out_proj.bias.normal_()
    ours = SelfAttention(C, H, attention_dropout=0.0, core=core).eval()
    with torch.no_grad():
        ours.qkv.weight.copy_(reference.in_proj_weight)
        ours.qkv.bias.copy_(reference.in_proj_bias)
        ours.out.weight.copy_(reference.out_proj.weight)
        ours.out.bias.copy_(reference.out_proj.bias)
    return ours, reference


def lengths_mask() -> torch.Tensor:
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2:] = False
    return mask


@pytest.mark.parametrize("core", sorted(ATTENTION))
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padding-mask"])
def test_matches_multihead_attention(core: str, padded: bool) -> None:
    ours, reference = copied_pair(core)
    x = torch.randn(B, T, C)
    mask = lengths_mask() if padded else None
    expected, expected_weights = reference(
        x, x, x, key_padding_mask=None if mask is None else ~mask, need_weights=True, average_attn_weights=False
    )
    got, _ = ours(x, key_mask(mask))
    torch.testing.assert_close(got, expected, **TOL)
    got_w, weights = ours(x, key_mask(mask), need_weights=True)
    torch.testing.assert_close(got_w, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)


def test_eager_equals_sdpa_with_mask() -> None:
    q, k, v = (torch.randn(B, H, T, C // H) for _ in range(3))
    mask = key_mask(lengths_mask())
    eager_out, weights = eager_attention(q, k, v, mask, 0.0, 0.5)
    sdpa_out, none = sdpa_attention(q, k, v, mask, 0.0, 0.5)
    torch.testing.assert_close(eager_out, sdpa_out, **TOL)
    assert none is None
    assert torch.all(weights[2, :, :, 2:] == 0), "padded keys must get zero weight"
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T))


def test_weights_requested_use_the_eager_path_even_when_sdpa_is_configured() -> None:
    ours, _ = copied_pair("sdpa")
    x = torch.randn(B, T, C)
    out_fast, no_weights = ours(x, key_mask(lengths_mask()))
    out_eager, weights = ours(x, key_mask(lengths_mask()), need_weights=True)
    assert no_weights is None and weights.shape == (B, H, T, T)
    torch.testing.assert_close(out_fast, out_eager, **TOL)


def test_attention_dropout_only_in_training() -> None:
    attn = SelfAttention(C, H, attention_dropout=0.5, core="eager")
    x = torch.randn(B, T, C)
    attn.train()
    a, _ = attn(x)
    b, _ = attn(x)
    assert not torch.allclose(a, b)
    attn.eval()
    torch.testing.assert_close(attn(x)[0], attn(x)[0], atol=0, rtol=0)
