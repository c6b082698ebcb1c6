"""Position information: learned and sinusoidal absolute tables, and rotary embeddings.

References: learned absolute positions as in BERT; the sinusoidal table of Vaswani et al. 2017
(section 3.5), fixed and not trained; rotary embeddings (RoPE, Su et al. 2021) in the
"rotate half" layout used by GPT-NeoX and ``transformers``' Llama, applied to q and k inside
attention so that q.k depends on the relative offset only.

Shape legend: B batch, H heads, T sequence length, D head size, C hidden size, P positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(p / 10000^(2i/dim)); (P, C)."""
    if dim % 2:
        raise ValueError(f"sinusoidal positions need an even hidden size, got {dim}")
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table.float()


class LearnedPositions(nn.Module):
    """A trained (P, C) table, as in BERT."""

    def __init__(self, num_positions: int, dim: int) -> None:
        super().__init__()
        self.table = nn.Embedding(num_positions, dim)

    def forward(self, seq_len: int) -> Tensor:
        """Returns (T, C) for positions 0..T-1."""
        return self.table.weight[:seq_len]


class SinusoidalPositions(nn.Module):
    """The fixed sinusoidal table times ``scale``, kept as a non-persistent buffer (nothing to save
    or load). The table's entries have RMS 1/sqrt(2); ``build_backbone`` scales it to the token
    embeddings' initial std, else the position signal swamps the token identity after the
    embedding LayerNorm (measured: unscaled, fine-tuning stays at chance)."""

    def __init__(self, num_positions: int, dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(num_positions, dim) * scale, persistent=False)

    def forward(self, seq_len: int) -> Tensor:
        """Returns (T, C) for positions 0..T-1."""
        return self.table[:seq_len]


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the last dimension split in two halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """Rotary position embedding for q and k of shape (B, H, T, D).

    Pair (j, j + D/2) of each head vector is rotated by angle p * base^(-2j/D) at position p,
    so the score q_m . k_n is a function of (m - n) only.
    """

    def __init__(self, head_size: int, num_positions: int, base: float) -> None:
        super().__init__()
        if head_size % 2:
            raise ValueError(f"rotary positions need an even head size, got {head_size}")
        inv_freq = base ** (-torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)  # (D/2,)
        angles = torch.outer(torch.arange(num_positions, dtype=torch.float64), inv_freq)  # (P, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (P, D)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        t = q.shape[-2]
        cos = self.cos[:t].to(q.dtype)  # (T, D), broadcast over (B, H)
        sin = self.sin[:t].to(q.dtype)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


# Absolute position tables added to the token embeddings; "rotary" adds none (it acts in attention).
POSITIONS: dict[str, type[nn.Module] | None] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "rotary": None,
}
