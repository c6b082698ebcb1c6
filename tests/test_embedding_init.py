"""PPMI + SVD word vectors: exact counts, the PMI formula, and neighbours that share contexts."""

import numpy as np
import pytest
import torch

from minibert import ModelConfig, build_mlm
from minibert.embedding_init import (
    canonical_signs,
    cooccurrences,
    ppmi,
    ppmi_svd,
    set_token_embeddings,
    unigram_log_probs,
)
from minibert.train_config import PPMIConfig
from minibert.validation import ConfigError


def test_cooccurrences_are_symmetric_and_weighted_by_distance() -> None:
    keep = np.array([-1, 0, 1, 2])  # id 0 is skipped
    counts = cooccurrences([np.array([1, 2, 3, 0, 1])], keep, window=2)
    assert counts.is_sparse and counts.is_coalesced()
    expected = np.zeros((3, 3))
    for i, j, w in [(0, 1, 1.0), (1, 2, 1.0), (0, 2, 0.5)]:  # pairs (1,2) (2,3) at distance 1; (1,3) at 2
        expected[i, j] += w
        expected[j, i] += w
    # (3, 1) at distance 2 across the skipped 0: weight 0.5 on (2, 0); (1, 1) at distance 4 is out of window
    expected[2, 0] += 0.5
    expected[0, 2] += 0.5
    np.testing.assert_allclose(counts.to_dense().numpy(), expected)


def test_cooccurrences_take_memory_by_the_pairs_seen_not_the_square_of_the_vocabulary() -> None:
    k = 200_000  # dense float64 counts would take 320 GB
    doc = np.arange(k, dtype=np.int64)
    counts = cooccurrences([doc], np.arange(k, dtype=np.int64), window=2)
    assert counts.shape == (k, k) and counts._nnz() == 2 * (k - 1) + 2 * (k - 2)
    assert counts[5, 6].item() == 1.0 and counts[7, 5].item() == 0.5 and counts[5, 8].item() == 0.0


def test_ppmi_matches_the_formula() -> None:
    counts = np.array([[0.0, 4.0, 1.0], [4.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    got = ppmi(torch.from_numpy(counts).to_sparse(), alpha=0.75).to_dense().numpy()
    ctx = counts.sum(0) ** 0.75
    for w in range(3):
        for c in range(3):
            if counts[w, c] == 0:
                assert got[w, c] == 0
            else:
                pmi = np.log(counts[w, c] / counts[w].sum() / (ctx[c] / ctx.sum()))
                assert got[w, c] == pytest.approx(max(pmi, 0.0), rel=1e-5)


def test_tokens_that_share_contexts_get_similar_vectors() -> None:
    rng = np.random.default_rng(0)  # two "topics": ids 5..24 and 25..44 never share a document
    docs = [rng.integers(lo, lo + 20, size=30) for lo in (5, 25) for _ in range(200)]
    ids, vectors = ppmi_svd(docs, vocab_size=50, dim=8, cfg=PPMIConfig(max_tokens=100))
    assert sorted(ids.tolist()) == list(range(5, 45)) and vectors.shape == (40, 8)
    assert vectors.std().item() == pytest.approx(0.02, rel=1e-4)
    unit = torch.nn.functional.normalize(vectors, dim=1)
    sims = unit @ unit.T
    topic = torch.as_tensor(ids >= 25)
    same = topic[:, None] == topic[None, :]
    off_diagonal = ~torch.eye(len(ids), dtype=torch.bool)
    assert sims[same & off_diagonal].mean() > 0.5 > sims[~same].mean()


def test_canonical_signs_undo_any_flip_of_a_singular_vector() -> None:
    u = torch.linalg.qr(torch.randn(50, 6, generator=torch.Generator().manual_seed(0)))[0]
    flips = torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0, 1.0])
    torch.testing.assert_close(canonical_signs(u * flips), canonical_signs(u))
    fixed = canonical_signs(u)
    assert (fixed.abs().argmax(dim=0) == fixed.argmax(dim=0)).all(), "each column's largest entry is positive"


def test_max_tokens_keeps_the_most_frequent_and_specials_are_untouched() -> None:
    docs = [np.array([5] * 50 + [6] * 30 + list(range(7, 40)) + [2, 3])]
    ids, _ = ppmi_svd(docs, vocab_size=40, dim=4, cfg=PPMIConfig(max_tokens=10))
    assert ids[:2].tolist() == [5, 6] and len(ids) == 10 and (ids >= 5).all()
    with pytest.raises(ValueError, match="need more than the 16 dimensions"):
        ppmi_svd(docs, vocab_size=40, dim=16, cfg=PPMIConfig(max_tokens=10))
    with pytest.raises(ConfigError, match="window >= 1"):
        PPMIConfig(window=0)


def test_set_token_embeddings_reaches_the_tied_decoder() -> None:
    mlm = build_mlm(ModelConfig.preset("tiny", vocab_size=60, num_layers=1)).eval()
    tokens = mlm.backbone.embeddings.tokens
    ids, vectors = torch.tensor([7, 9]), torch.randn(2, tokens.embedding_dim)
    before = tokens.weight[8].clone()
    set_token_embeddings(tokens, ids, vectors)
    assert torch.equal(tokens.weight[[7, 9]], vectors)
    assert torch.equal(tokens.weight[8], before)
    # the decoder reads the same matrix: logits of token 7 move with its new vector
    ids_in = torch.tensor([[2, 7, 9, 3]])
    positions = torch.tensor([[False, True, False, False]])
    with torch.no_grad():
        first = mlm(ids_in, None, masked_positions=positions)[0, 7]
        set_token_embeddings(tokens, ids[:1], vectors[:1] * 3)
        assert not torch.allclose(mlm(ids_in, None, masked_positions=positions)[0, 7], first)


def test_unigram_log_probs_are_smoothed_log_frequencies() -> None:
    docs = [np.array([5, 5, 6]), np.array([5, 7])]
    got = unigram_log_probs(docs, vocab_size=9, smoothing=1.0)
    counts = np.array([0, 0, 0, 0, 0, 3, 1, 1, 0], dtype=np.float64) + 1.0
    np.testing.assert_allclose(got.numpy(), np.log(counts / counts.sum()), rtol=1e-6)
    assert got.dtype == torch.float32 and float(got.exp().sum()) == pytest.approx(1.0, rel=1e-6)
    assert got[5] > got[6] == got[7] > got[0] == got[8]  # unseen ids (the specials among them) share the floor


def test_unigram_log_probs_reject_ids_outside_the_vocabulary_and_bad_smoothing() -> None:
    with pytest.raises(ValueError, match="id 9 .* vocabulary of 9"):
        unigram_log_probs([np.array([1, 9])], vocab_size=9)
    with pytest.raises(ValueError, match="smoothing"):
        unigram_log_probs([np.array([1])], vocab_size=9, smoothing=0.0)


def test_cooccurrences_equal_a_direct_count_of_every_window() -> None:
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 12, size=n) for n in rng.integers(1, 40, size=60)]  # repeats: diagonal pairs
    keep = np.full(12, -1, dtype=np.int64)
    keep[2:11] = np.arange(9)  # ids 0, 1 and 11 skipped
    expected = np.zeros((9, 9))
    for doc in docs:
        for i in range(len(doc)):
            for j in range(i + 1, min(i + 4, len(doc))):
                a, b = keep[doc[i]], keep[doc[j]]
                if a >= 0 and b >= 0:
                    expected[a, b] += 1 / (j - i)
                    expected[b, a] += 1 / (j - i)
    counts = cooccurrences(docs, keep, window=3)
    assert counts.is_coalesced() and expected.diagonal().sum() > 0
    np.testing.assert_allclose(counts.to_dense().numpy(), expected, rtol=1e-12)
    # coalesced means row-major order with no repeats; what the sparse ops downstream rely on
    flat = (counts.indices()[0] * 9 + counts.indices()[1]).numpy()
    assert (np.diff(flat) > 0).all()
