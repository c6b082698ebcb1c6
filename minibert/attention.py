"""Multi-head self-attention: a pure attention core and a module that owns the projections.

Reference: BERT (Devlin et al. 2018) as implemented by ``transformers.BertSelfAttention``.
Departures from it:

1. Q, K and V come from one fused ``(hidden, 3 * hidden)`` projection (one GEMM, not three);
   the Hugging Face interop splits and joins it (``minibert.hf_interop``).
2. The core is a pure function chosen from ``ATTENTION``: ``sdpa`` calls
   ``F.scaled_dot_product_attention`` (fused kernels); ``eager`` is the textbook formula and the
   only one that can return the attention weights, so asking for weights selects it.
3. Rotary position embeddings, when configured, rotate q and k here (``minibert.positional``).

Shape legend:
    B batch, T sequence length, C hidden size, H heads, D head size (C = H * D).
The key mask is boolean, True where a token is real: (B, T) from the caller, broadcast to
(B, 1, 1, T) before it reaches a core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AttentionCore = Callable[[Tensor, Tensor, Tensor, Tensor | None, float, float], tuple[Tensor, Tensor | None]]


def eager_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, scale: float
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v, written out so the weights can be returned.

    q, k, v: (B, H, T, D); mask: bool (B, 1, 1, T), True = attend. Returns the output
    (B, H, T, D) and the attention probabilities (B, H, T, T) before dropout (rows sum to 1;
    dropout applies only to the copy that weighs v).
    """
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1)
    dropped = F.dropout(probs, p=dropout_p) if dropout_p > 0.0 else probs
    return torch.matmul(dropped, v), probs  # (B, H, T, D), (B, H, T, T)


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, scale: float
) -> tuple[Tensor, None]:
    """The same maths through ``F.scaled_dot_product_attention``; never returns weights."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return out, None  # (B, H, T, D)


ATTENTION: dict[str, AttentionCore] = {"eager": eager_attention, "sdpa": sdpa_attention}


class RotaryLike(Protocol):
    """What the attention module needs from a rotary embedding (see ``positional.Rotary``)."""

    def __call__(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]: ...


class SelfAttention(nn.Module):
    """Fused-QKV multi-head self-attention followed by the output projection.

    The module owns the projections only; ``core`` (a key of ``ATTENTION``) does the maths.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        attention_dropout: float,
        core: str,
        rotary: RotaryLike | None = None,
    ) -> None:
        super().__init__()
        assert hidden_size % num_heads == 0, "validated by ModelConfig"
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.attention_dropout = attention_dropout
        self.core = ATTENTION[core]
        self.rotary = rotary
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, C); mask: bool (B, 1, 1, T). Returns (B, T, C) and weights (B, H, T, T) or None."""
        b, t, c = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.num_heads, self.head_size)  # (B, T, 3, H, D)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, H, T, D)
        if self.rotary is not None:
            q, k = self.rotary(q, k)
        core = eager_attention if need_weights else self.core
        dropout_p = self.attention_dropout if self.training else 0.0
        y, weights = core(q, k, v, mask, dropout_p, self.head_size**-0.5)
        y = y.transpose(1, 2).reshape(b, t, c)  # (B, T, C)
        return self.out(y), weights
