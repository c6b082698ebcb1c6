"""The hashed bag of token n-grams (minibert.ngram_bag) and the word-CNN that carries one: the slots
against a plain-Python hash, padding, a zero start, what it learns that width-1 filters cannot,
its learning-rate group, its checkpoint and its ONNX graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_textcnn import order_task_accuracy

from minibert.ngram_bag import PRIME, NGramBag, ngram_ids
from minibert.textcnn import TextCNNConfig, bag_lr_scale, build_textcnn, load_textcnn, save_textcnn
from minibert.validation import ConfigError


def reference_slots(row: list[int], vocab: int, buckets: int, n: int) -> list[int]:
    """Every unigram's id, then every k-gram's slot for k = 2..n, hashed token by token in Python."""
    slots = list(row)
    for k in range(2, n + 1):
        for start in range(len(row) - k + 1):
            h = row[start]
            for token in row[start + 1:start + k]:
                h = (h * PRIME + token) % buckets
            slots.append(vocab + h)
    return slots


def test_slots_match_a_plain_python_hash_and_padding_is_invalid() -> None:
    ids = torch.tensor([[7, 3, 9, 4, 0, 0], [15000, 15999, 2, 8, 11, 5]])
    mask = ids != 0
    slots, valid = ngram_ids(ids, mask, 16000, 1 << 20, 3)
    assert slots.shape == valid.shape == (2, 6 + 5 + 4)
    for b, length in enumerate((4, 6)):
        row = ids[b, :length].tolist()
        expected = reference_slots(row, 16000, 1 << 20, 3)
        assert sorted(slots[b][valid[b]].tolist()) == sorted(expected)
    assert int(valid[0].sum()) == 4 + 3 + 2, "n-grams touching the padding are out"
    assert int(slots.min()) >= 0 and int(slots[:, 6:].min()) >= 16000 and int(slots.max()) < 16000 + (1 << 20)


def test_the_bag_is_a_mean_of_its_ngram_weights_and_starts_at_zero() -> None:
    bag = NGramBag(vocab_size=10, buckets=8, n=2, num_labels=2)
    ids = torch.tensor([[1, 2, 3, 0]])
    mask = ids != 0
    assert torch.count_nonzero(bag(ids, mask)) == 0
    with torch.no_grad():
        bag.weight.weight.copy_(torch.arange(36, dtype=torch.float32).reshape(18, 2))
    slots = reference_slots([1, 2, 3], 10, 8, 2)
    expected = bag.weight.weight[slots].mean(dim=0, keepdim=True)
    torch.testing.assert_close(bag(ids, mask), expected)
    with pytest.raises(ValueError, match="buckets 0"):
        NGramBag(10, 0, 2, 2)


def test_a_word_cnn_that_gains_a_bag_starts_as_it_was_and_ignores_padding() -> None:
    torch.manual_seed(0)
    plain = build_textcnn(TextCNNConfig(vocab_size=50, dim=8, widths=(1, 2), filters=4)).eval()
    torch.manual_seed(0)
    bagged = build_textcnn(TextCNNConfig(vocab_size=50, dim=8, widths=(1, 2), filters=4, bag_buckets=64)).eval()
    ids = torch.tensor([[5, 6, 7, 8, 0, 0]])
    torch.testing.assert_close(bagged(ids), plain(ids))
    from minibert.model import parameter_counts

    assert parameter_counts(bagged)[1] == parameter_counts(plain)[1], "the bag is a lookup table, counted with the embedding"
    assert parameter_counts(bagged)[0] == parameter_counts(plain)[0] + (50 + 64) * 2
    with torch.no_grad():
        bagged.bag.weight.weight.normal_()
    torch.testing.assert_close(bagged(ids[:, :4]), bagged(ids))
    assert not torch.allclose(bagged(ids), plain(ids))


@pytest.mark.parametrize("buckets, learns", [(0, False), (4096, True)])
def test_the_bag_learns_word_order_that_width_one_filters_cannot(buckets: int, learns: bool) -> None:
    cfg = TextCNNConfig(vocab_size=20, dim=8, widths=(1,), filters=8, dropout=0.0, bag_buckets=buckets)
    accuracy = order_task_accuracy(cfg, lr=0.05)
    assert (accuracy > 0.95) if learns else (accuracy < 0.65), accuracy


def test_only_the_bag_takes_the_scaled_learning_rate() -> None:
    from minibert.distill import LogitDistiller
    from minibert.train_config import OptimConfig
    from minibert.trainer import build_optimizer

    model = build_textcnn(TextCNNConfig(vocab_size=20, dim=8, widths=(1,), filters=2, bag_buckets=16))
    scale = bag_lr_scale(30.0)
    named = dict(LogitDistiller(model).named_parameters())  # as the distill stage names them
    assert {name for name in named if scale(name) == 30.0} == {"student.bag.weight.weight"}
    opt = build_optimizer(LogitDistiller(model), OptimConfig(lr=1e-3), scale)
    bag = model.bag.weight.weight
    lrs = [group["lr"] for group in opt.param_groups if any(p is bag for p in group["params"])]
    assert lrs == [pytest.approx(3e-2)]
    others = {group["lr"] for group in opt.param_groups if not any(p is bag for p in group["params"])}
    assert others == {1e-3}


def test_a_bagged_checkpoint_round_trips_and_bad_bags_name_their_field(tmp_path: Path) -> None:
    cfg = TextCNNConfig(vocab_size=25, dim=6, widths=(2,), filters=3, bag_buckets=32, bag_ngrams=3)
    model = build_textcnn(cfg).eval()
    with torch.no_grad():
        model.bag.weight.weight.normal_()
    loaded, loaded_cfg = load_textcnn(save_textcnn(model, cfg, tmp_path / "m.safetensors"))
    assert loaded_cfg == cfg
    ids = torch.tensor([[1, 2, 3, 4, 0]])
    torch.testing.assert_close(loaded(ids), model(ids))
    for changes in ({"bag_buckets": -1}, {"bag_buckets": 2**24 + 1}, {"bag_ngrams": 0}):
        with pytest.raises(ConfigError, match="bag_"):
            TextCNNConfig(vocab_size=10, dim=4, **changes)


def test_the_bag_exports_to_onnx_and_hashes_there_as_in_torch(tmp_path: Path) -> None:
    from minibert.engines import load_session, onnx_logits
    from minibert.export import export_onnx

    torch.manual_seed(0)
    vocab = 16000  # large ids: the int64 hash must not overflow or differ in the graph
    model = build_textcnn(TextCNNConfig(vocab_size=vocab, dim=8, widths=(1, 3), filters=4, bag_buckets=1 << 20, bag_ngrams=3)).eval()
    with torch.no_grad():
        model.bag.weight.weight.normal_()
    path = export_onnx(model, tmp_path / "bag.onnx")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, vocab, (3, 40), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0
    ids[1, 25:] = 0
    got = onnx_logits(load_session(path), ids, mask)
    np.testing.assert_allclose(got, model(ids, mask).detach().numpy(), atol=1e-4)
