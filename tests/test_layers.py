"""Our encoder layers against torch.nn.TransformerEncoderLayer with copied weights."""

import pytest
import torch
from torch import nn

from minibert.attention import SelfAttention
from minibert.layers import NORM_STYLES, FeedForward
from minibert.model import key_mask

B, T, C, H, FF = 2, 7, 32, 4, 64
EPS = 1e-5


def copied_pair(norm_style: str, activation: str) -> tuple[nn.Module, nn.TransformerEncoderLayer]:
    reference = nn.TransformerEncoderLayer(
        C, H, dim_feedforward=FF, dropout=0.0, activation=activation, layer_norm_eps=EPS,
        batch_first=True, norm_first=norm_style == "pre",
    )
    with torch.no_grad():
        for p in reference.parameters():  # randomise everything, norms and biases included
            p.copy_(torch.randn_like(p) * 0.2)
    ours = NORM_STYLES[norm_style](
        attention=SelfAttention(C, H, attention_dropout=0.0, core="sdpa"),
        feed_forward=FeedForward(C, FF, activation),
        hidden_size=C,
        hidden_dropout=0.0,
        layer_norm_eps=EPS,
    )
    pairs = {
        "attention.qkv.weight": reference.self_attn.in_proj_weight,
        "attention.qkv.bias": reference.self_attn.in_proj_bias,
        "attention.out.weight": reference.self_attn.out_proj.weight,
        "attention.out.bias": reference.self_attn.out_proj.bias,
        "feed_forward.up.weight": reference.linear1.weight,
        "feed_forward.up.bias": reference.linear1.bias,
        "feed_forward.down.weight": reference.linear2.weight,
        "feed_forward.down.bias": reference.linear2.bias,
        "attention_norm.weight": reference.norm1.weight,
        "attention_norm.bias": reference.norm1.bias,
        "feed_forward_norm.weight": reference.norm2.weight,
        "feed_forward_norm.bias": reference.norm2.bias,
    }
    ours.load_state_dict({k: v.detach().clone() for k, v in pairs.items()}, strict=True)
    return ours, reference


@pytest.mark.parametrize("norm_style", ["post", "pre"])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_layer_matches_transformer_encoder_layer(norm_style: str, activation: str) -> None:
    ours, reference = copied_pair(norm_style, activation)
    # train mode keeps nn.TransformerEncoderLayer off its fused fast path; dropout is 0 on both.
    ours.train()
    reference.train()
    x = torch.randn(B, T, C)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 4:] = False
    expected = reference(x, src_key_padding_mask=~mask)
    got, _ = ours(x, key_mask(mask))
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
