"""Count-based starts for MLM: word vectors from PPMI of windowed co-occurrences and a truncated
SVD, and the output bias at the corpus's log unigram frequencies.

Minutes of MLM on a CPU leave an encoder at the unigram stage, its word embeddings barely
moved from random. Distributional statistics of the same corpus (Levy, Goldberg & Dagan 2015:
positive PMI with context-distribution smoothing, SVD with the singular values' square root)
give embeddings where "great" sits next to "excellent" after one pass over the text, in
seconds. ``ppmi_svd`` computes them over the ``max_tokens`` most frequent ids; the rest (and the
special tokens) keep their random initialisation. Pure maths: ids in, a (V, dim) tensor out.

``unigram_log_probs`` is what the MLM decoder's bias starts at. From a zero bias, the cheapest
way down from log V to the unigram entropy is for the encoder to give every token the same
vector, aimed at the frequent words: with a 4 x 256 encoder at lr 1e-3 that happened within
20 steps and never undid itself on a CPU budget (every token's final state equal to 4 decimals,
fine-tuning stuck at chance for hundreds of steps). Starting the bias at the unigram solution
leaves the encoder nothing to gain from collapsing, and its gradient goes to context.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from minibert.tokenizer import SPECIAL_TOKENS
from minibert.train_config import PPMIConfig


def cooccurrences(docs: Sequence[np.ndarray], keep: np.ndarray, window: int) -> Tensor:
    """Symmetric (K, K) float64 counts of kept ids within ``window`` of each other, 1/distance weighted,
    as a coalesced sparse COO tensor: memory follows the distinct pairs seen, not K * K (a dense
    float64 matrix of 32,000 ids is 8 GB, and counting it took three of them).

    Each pair is counted once, as (smaller row, larger row), and mirrored when the distinct pairs are
    known: the sorts run over half the keys that counting both orders would. A token next to itself
    lands on the diagonal twice, as it would counted in both orders.

    ``keep``: (V,) int64 mapping an id to its row in 0..K-1, or -1 to skip it.
    """
    k = int(keep.max()) + 1
    key_type = np.int32 if k * k < 2**31 else np.int64  # pair keys lo * k + hi; int32 sorts twice as fast
    keys, weights = [np.zeros(0, key_type)], [np.zeros(0, np.float64)]
    for distance in range(1, window + 1):
        long_enough = [d for d in docs if len(d) > distance]
        if not long_enough:
            break
        a = keep[np.concatenate([d[:-distance] for d in long_enough])]
        b = keep[np.concatenate([d[distance:] for d in long_enough])]
        both = (a >= 0) & (b >= 0)
        a, b = a[both].astype(key_type), b[both].astype(key_type)
        pairs, seen = np.unique(np.minimum(a, b) * k + np.maximum(a, b), return_counts=True)
        keys.append(pairs)
        weights.append(seen / distance)
    pairs, where = np.unique(np.concatenate(keys), return_inverse=True)
    counts = np.bincount(where, weights=np.concatenate(weights), minlength=len(pairs))
    lo, hi = pairs // k, pairs % k
    off = lo != hi
    rows, cols = np.concatenate([lo, hi[off]]), np.concatenate([hi, lo[off]])
    values = np.concatenate([np.where(off, counts, 2 * counts), counts[off]])
    order = np.argsort(rows * k + cols)  # coalesced: row-major order (the keys are distinct)
    indices = torch.from_numpy(np.stack([rows[order], cols[order]]).astype(np.int64))
    return torch.sparse_coo_tensor(indices, torch.from_numpy(values[order]), (k, k), is_coalesced=True, check_invariants=False)


def token_counts(docs: Sequence[np.ndarray], vocab_size: int) -> np.ndarray:
    """(max(V, largest id + 1),) int64 occurrences of each id over ``docs``."""
    return np.bincount(np.concatenate(list(docs)) if docs else np.zeros(0, np.int64), minlength=vocab_size)


def ppmi(counts: Tensor, alpha: float) -> Tensor:
    """Positive PMI of sparse co-occurrence ``counts`` with the context distribution raised to
    ``alpha``: a sparse float32 tensor, zero (absent) where nothing co-occurred or PMI <= 0."""
    counts = counts.coalesce()
    (row, col), values = counts.indices(), counts.values()
    k = counts.shape[0]
    rows = torch.zeros(k, dtype=values.dtype).index_add_(0, row, values)
    contexts = torch.zeros(k, dtype=values.dtype).index_add_(0, col, values) ** alpha
    pmi = torch.log(values * contexts.sum() / (rows[row] * contexts[col]))
    positive = pmi > 0
    return torch.sparse_coo_tensor(counts.indices()[:, positive], pmi[positive].float(), counts.shape,
                                   is_coalesced=True, check_invariants=False)


def ppmi_svd(docs: Sequence[np.ndarray], vocab_size: int, dim: int, cfg: PPMIConfig, seed: int = 0) -> tuple[Tensor, Tensor]:
    """(ids (K,), vectors (K, dim)): embeddings for the K most frequent non-special ids in ``docs``."""
    freq = token_counts(docs, vocab_size)[:vocab_size]
    freq[: len(SPECIAL_TOKENS)] = 0  # specials are never counted or overwritten
    ids = np.argsort(-freq, kind="stable")[: cfg.max_tokens]
    ids = ids[freq[ids] > 0]
    if len(ids) <= dim:
        raise ValueError(f"ppmi_svd: {len(ids)} distinct tokens in the corpus; need more than the {dim} dimensions")
    keep = np.full(max(vocab_size, 1), -1, dtype=np.int64)
    keep[ids] = np.arange(len(ids))
    matrix = ppmi(cooccurrences(docs, keep, cfg.window), cfg.alpha)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # svd_lowrank draws a random projection
    try:
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta": products are all it is used for
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            csr = matrix.to_sparse_csr()
        u, s, _ = torch.svd_lowrank(csr, q=dim, niter=4)  # CSR products: 3x faster than COO
    finally:
        torch.random.set_rng_state(generator_state)
    vectors = canonical_signs(u) * s.sqrt()
    vectors = vectors - vectors.mean(dim=0)
    return torch.from_numpy(ids), vectors * (cfg.init_std / vectors.std())


def canonical_signs(u: Tensor) -> Tensor:
    """``u`` with each column's sign chosen so that its largest-magnitude entry is positive. A singular
    vector is defined up to sign, and which one an SVD returns depends on its random start and on
    the matmul kernels (dense or sparse): fixed, the same PPMI matrix gives the same vectors."""
    return u * u.gather(0, u.abs().argmax(dim=0, keepdim=True)).sign()


def unigram_log_probs(docs: Sequence[np.ndarray], vocab_size: int, smoothing: float = 1.0) -> Tensor:
    """(V,) float32 log of each id's add-``smoothing`` frequency in ``docs``; ids never seen (the
    special tokens among them) get the smoothed floor. exp() of it sums to 1."""
    if smoothing <= 0:
        raise ValueError(f"unigram_log_probs: smoothing must be > 0, got {smoothing}")
    counts = token_counts(docs, vocab_size)
    if len(counts) > vocab_size:
        raise ValueError(f"unigram_log_probs: id {len(counts) - 1} in the corpus is outside the vocabulary of {vocab_size}")
    smoothed = counts.astype(np.float64) + smoothing
    return torch.from_numpy(np.log(smoothed / smoothed.sum()).astype(np.float32))


@torch.no_grad()
def set_token_embeddings(embedding: torch.nn.Embedding, ids: Tensor, vectors: Tensor) -> None:
    """Overwrite rows ``ids`` of ``embedding`` (the MLM decoder shares it when tied)."""
    embedding.weight[ids] = vectors.to(embedding.weight.dtype)
