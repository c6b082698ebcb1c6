"""How different an encoder's token states are from one another: the collapse check of MLM.

An encoder that gives every token of every text the same final state has collapsed (it predicts
the unigram distribution whatever the input), and fine-tuning from it starts at chance. The
spread is the mean squared deviation of each real token's state from its sequence's mean state,
per hidden dimension: about 0.7 for a freshly initialised post-norm encoder (unit-variance states
after LayerNorm), 0 for a collapsed one.
"""

from __future__ import annotations

from torch import Tensor


def token_deviation(hidden: Tensor, mask: Tensor) -> tuple[float, int]:
    """(sum of squared deviations from the sequence mean over real tokens and dimensions, number of
    real token-dimensions) for hidden (B, T, C) and mask (B, T) of 1/0: sums, so batches add up."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    tokens = m.sum(dim=1).clamp(min=1.0)
    mean = (hidden * m).sum(dim=1, keepdim=True) / tokens.unsqueeze(1)
    squared = ((hidden - mean) ** 2 * m).sum()
    return float(squared), int(mask.sum()) * hidden.shape[-1]
