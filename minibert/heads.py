"""Task heads: masked-language-model head and sequence classifier head with pooling.

Reference: ``transformers.BertLMPredictionHead`` (dense -> GELU -> LayerNorm -> decoder tied to
the word embeddings, plus a vocabulary bias) and ``BertPooler`` + ``BertForSequenceClassification``
(dense -> tanh on the pooled vector, dropout, linear classifier). Departures:

1. The MLM head has a sparse mode: given the masked positions it transforms and decodes only
   those rows, so the (tokens x vocabulary) projection, about half of a small BERT's step, is
   paid for the ~15 % of tokens that carry a loss.
2. Pooling is a choice (``POOLING``): CLS as BERT, or mean / max over real tokens only.
   The pooler dense + tanh is applied after any pooling.

Shape legend: B batch, T sequence length, C hidden size, V vocabulary, N masked tokens, L labels.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def cls_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """The first token's vector ([CLS]); (B, T, C) -> (B, C)."""
    return hidden[:, 0]


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean over real tokens (mask True); padding never counts. (B, T, C), (B, T) -> (B, C)."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def max_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """Element-wise max over real tokens; padding is set to -inf first. (B, T, C) -> (B, C)."""
    return hidden.masked_fill(~mask.unsqueeze(-1), torch.finfo(hidden.dtype).min).amax(1)


POOLING: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"cls": cls_pool, "mean": mean_pool, "max": max_pool}


class MLMHead(nn.Module):
    """Transform (dense, GELU, LayerNorm) then decode with the tied word-embedding matrix.

    The decoder matrix is the backbone's word embedding, passed in at call time rather than
    held here, so a checkpoint stores it once (safetensors refuses aliased tensors).
    """

    def __init__(self, hidden_size: int, vocab_size: int, layer_norm_eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: Tensor, decoder_weight: Tensor, positions: Tensor | None = None) -> Tensor:
        """hidden (B, T, C), decoder_weight (V, C) -> logits (B, T, V); with ``positions``, logits
        (N, V) at N positions only: a bool (B, T) mask (its True entries in row-major order), or
        int64 (N,) indices into the flattened B * T positions. Indices made on the CPU keep a GPU
        step free of host syncs; a bool mask costs one (the count of True entries)."""
        if positions is not None:
            if positions.dtype == torch.bool:
                hidden = hidden[positions]  # (N, C)
            else:
                hidden = hidden.flatten(0, 1).index_select(0, positions)  # (N, C)
        h = self.norm(F.gelu(self.dense(hidden)))
        return F.linear(h, decoder_weight, self.bias)


class ClassifierHead(nn.Module):
    """Pool -> dense + tanh (BERT's pooler) -> dropout -> linear to L labels."""

    def __init__(self, hidden_size: int, num_labels: int, pooling: str, dropout: float) -> None:
        super().__init__()
        self.pool = POOLING[pooling]
        self.pooler = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """hidden (B, T, C), mask bool (B, T) -> logits (B, L)."""
        pooled = torch.tanh(self.pooler(self.pool(hidden, mask)))
        return self.classifier(self.dropout(pooled))
