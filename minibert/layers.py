"""Feed-forward block, encoder layers (post-norm as in BERT, and pre-norm) and the layer stack.

Reference: ``transformers.BertLayer`` (post-norm: x = LN(x + Dropout(Sublayer(x)))) and
``torch.nn.TransformerEncoderLayer(norm_first=True)`` for pre-norm
(x = x + Dropout(Sublayer(LN(x)))). Departures: the pre-norm stack ends with a final LayerNorm
(as GPT-2 and every pre-norm BERT variant do), since its residual stream is never normalised
otherwise. Dropout sits where BERT has it: on attention probabilities and on each sublayer's
output before the residual add.

Shape legend: B batch, T sequence length, C hidden size, I intermediate (feed-forward) size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from minibert.attention import SelfAttention

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,  # exact (erf) GELU, as in BERT; not the tanh approximation
    "relu": F.relu,
}


class FeedForward(nn.Module):
    """Linear(C, I) -> activation -> Linear(I, C)."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size)
        self.act = ACTIVATIONS[activation]
        self.down = nn.Linear(intermediate_size, hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))  # (B, T, C)


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward sublayers with residuals; subclasses place the norms."""

    def __init__(
        self,
        attention: SelfAttention,
        feed_forward: FeedForward,
        hidden_size: int,
        hidden_dropout: float,
        layer_norm_eps: float,
    ) -> None:
        super().__init__()
        self.attention = attention
        self.attention_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.feed_forward = feed_forward
        self.feed_forward_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, C); mask: bool (B, 1, 1, T). Returns (B, T, C) and weights (B, H, T, T) or None."""
        raise NotImplementedError


class PostNormLayer(EncoderLayer):
    """BERT's original order: normalise after each residual add."""

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        a, weights = self.attention(x, mask, need_weights)
        x = self.attention_norm(x + self.dropout(a))
        x = self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))
        return x, weights


class PreNormLayer(EncoderLayer):
    """Normalise each sublayer's input; the residual stream stays un-normalised (stabler, no warmup)."""

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        a, weights = self.attention(self.attention_norm(x), mask, need_weights)
        x = x + self.dropout(a)
        x = x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        return x, weights


NORM_STYLES: dict[str, type[EncoderLayer]] = {"post": PostNormLayer, "pre": PreNormLayer}


class Encoder(nn.Module):
    """A stack of encoder layers, with a final LayerNorm when the layers are pre-norm."""

    def __init__(self, layers: list[EncoderLayer], final_norm: nn.LayerNorm | None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        # Recompute each layer's activations in the backward pass instead of storing them:
        # less memory for about one extra forward. Training only; set via set_gradient_checkpointing.
        self.gradient_checkpointing = False

    def forward(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Returns hidden states (B, T, C) and, if asked, one (B, H, T, T) weight tensor a layer."""
        all_weights = []
        for layer in self.layers:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x, weights = checkpoint(layer, x, mask, need_weights, use_reentrant=False)
            else:
                x, weights = layer(x, mask, need_weights)
            if need_weights:
                all_weights.append(weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, tuple(all_weights)
