"""A bag of hashed token n-grams scored by one weight vector each: a linear classifier over the
text's n-gram frequencies (fastText, Joulin et al. 2017, "Bag of Tricks for Efficient Text
Classification"), to sit beside a network's own features.

Reference: fastText averages the embeddings of the text's words and hashed word n-grams, then a
linear layer. Differences: the n-grams are of the tokenizer's ids (WordPiece pieces, not words),
and each n-gram's vector is the label logits directly (the linear layer folded in, as with
fastText's hidden width equal to the label count); the weights start at zero, so a model that
gains the bag starts as it was. Unigrams take their own id; an n-gram of 2 or more tokens is
hashed into ``buckets`` slots after the vocabulary, ``h = (h * PRIME + id) mod buckets`` token by
token, all integer arithmetic (ONNX ``Mul``, ``Add`` and ``Mod``), so an exported graph hashes
as training did.

Shapes: B batch, T tokens, N n-gram positions (all lengths together), L labels.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

PRIME = 1_000_003  # the hash's multiplier; h < buckets <= 2**24 keeps h * PRIME + id inside int64


def ngram_ids(ids: Tensor, mask: Tensor, vocab_size: int, buckets: int, n: int) -> tuple[Tensor, Tensor]:
    """(B, T) ids and mask (True = token) -> (B, N) bag slots and (B, N) validity: the unigrams'
    own ids, then every 2..n-gram's hashed slot (offset by ``vocab_size``); an n-gram touching
    padding is invalid."""
    slots, valid = [ids], [mask]
    h, ok = ids, mask
    for k in range(2, n + 1):
        h = torch.remainder(h[:, :-1] * PRIME + ids[:, k - 1:], buckets)  # the n-gram starting at each position
        ok = ok[:, :-1] & mask[:, k - 1:]
        slots.append(h + vocab_size)
        valid.append(ok)
    return torch.cat(slots, dim=1), torch.cat(valid, dim=1)


class NGramBag(nn.Module):
    def __init__(self, vocab_size: int, buckets: int, n: int, num_labels: int) -> None:
        super().__init__()
        if not 1 <= buckets <= 2**24 or n < 1:
            raise ValueError(f"buckets {buckets} must be in [1, 2**24] and n {n} >= 1")
        self.vocab_size, self.buckets, self.n = vocab_size, buckets, n
        # zeros, drawing nothing from the RNG: the rest of a model initialises as it would without a bag
        self.weight = nn.Embedding.from_pretrained(torch.zeros(vocab_size + buckets, num_labels), freeze=False)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """(B, T) ids, (B, T) bool mask -> (B, L): the mean of the valid n-grams' weights."""
        slots, valid = ngram_ids(ids, mask, self.vocab_size, self.buckets, self.n)
        keep = valid.to(self.weight.weight.dtype)[..., None]  # (B, N, 1)
        total = (self.weight(slots) * keep).sum(dim=1)  # (B, L)
        return total / keep.sum(dim=1).clamp_min(1.0)
