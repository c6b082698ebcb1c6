"""Whole-model invariants: padding, eager vs SDPA, sparse MLM head, pooling, dropout, tying."""

import numpy as np
import pytest
import torch
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, build_classifier, build_mlm
from minibert.heads import POOLING, max_pool, mean_pool

V = 300
TOL = dict(atol=1e-5, rtol=1e-5)


def tiny(**overrides: object) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=V, **overrides)


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rotary"])
@pytest.mark.parametrize("norm_style", ["post", "pre"])
def test_extra_padding_leaves_real_positions_unchanged(position: str, norm_style: str) -> None:
    model = build_mlm(tiny(position=position, norm_style=norm_style)).eval()
    ids, mask = padded_batch(V, [6, 3, 5])
    wide_ids = torch.cat([ids, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    wide_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        narrow = model(ids, mask)
        wide = model(wide_ids, wide_mask)
    real = mask.bool()
    torch.testing.assert_close(wide[:, :6][real], narrow[real], **TOL)


@pytest.mark.parametrize("pooling", sorted(POOLING))
def test_classifier_ignores_padding(pooling: str) -> None:
    model = build_classifier(tiny(), ClassifierConfig(pooling=pooling)).eval()
    ids, mask = padded_batch(V, [5, 2])
    wide_ids = torch.cat([ids, torch.full((2, 3), 7)], dim=1)  # junk (non-pad) ids under a 0 mask
    wide_mask = torch.cat([mask, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(wide_ids, wide_mask), model(ids, mask), **TOL)


def test_eager_and_sdpa_models_agree() -> None:
    sdpa = build_mlm(tiny(attention="sdpa")).eval()
    eager = build_mlm(tiny(attention="eager")).eval()
    eager.load_state_dict(sdpa.state_dict())
    ids, mask = padded_batch(V, [8, 5, 1])
    with torch.no_grad():
        torch.testing.assert_close(eager(ids, mask), sdpa(ids, mask), **TOL)


def test_attention_weights_are_returned_per_layer_and_ignore_padding() -> None:
    cfg = tiny()
    model = build_mlm(cfg).eval()
    ids, mask = padded_batch(V, [6, 4])
    with torch.no_grad():
        _, weights = model.backbone(ids, mask, need_weights=True)
    assert len(weights) == cfg.num_layers
    assert weights[0].shape == (2, cfg.num_heads, 6, 6)
    assert torch.all(weights[1][1, :, :, 4:] == 0)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, cfg.num_heads, 6))


def test_sparse_mlm_head_equals_dense_logits_at_masked_positions() -> None:
    model = build_mlm(tiny()).eval()
    ids, mask = padded_batch(V, [10, 7])
    positions = torch.zeros_like(ids, dtype=torch.bool)
    positions[0, [1, 4, 9]] = True
    positions[1, [0, 6]] = True
    with torch.no_grad():
        dense = model(ids, mask)
        sparse = model(ids, mask, masked_positions=positions)
    assert sparse.shape == (5, V)
    torch.testing.assert_close(sparse, dense[positions], **TOL)
    with torch.no_grad():  # the same positions as int64 indices into the flattened (B * T) positions
        by_index = model(ids, mask, masked_positions=positions.flatten().nonzero().squeeze(1))
    torch.testing.assert_close(by_index, sparse, rtol=0, atol=0)


def test_mlm_decoder_is_tied_to_the_word_embeddings_and_stored_once() -> None:
    model = build_mlm(tiny())
    assert not any("decoder" in key for key in model.state_dict())
    ids, mask = padded_batch(V, [5])
    model(ids, mask).sum().backward()
    grad = model.backbone.embeddings.tokens.weight.grad
    unseen = sorted(set(range(5, V)) - set(ids.flatten().tolist()))[0]
    assert grad[unseen].abs().sum() > 0, "the decoder's gradient must reach the embedding matrix"


def test_mean_and_max_pooling_skip_padding() -> None:
    hidden = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    hidden_junk = hidden.clone()
    hidden_junk[0, 2:] = 1e4
    torch.testing.assert_close(mean_pool(hidden_junk, mask)[0], hidden[0, :2].mean(0))
    torch.testing.assert_close(max_pool(hidden_junk, mask)[0], hidden[0, :2].amax(0))
    torch.testing.assert_close(mean_pool(hidden, mask)[1], hidden[1].mean(0))


def test_dropout_acts_in_training_only() -> None:
    model = build_classifier(tiny(), ClassifierConfig())
    ids, mask = padded_batch(V, [6, 6])
    model.train()
    assert not torch.allclose(model(ids, mask), model(ids, mask))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask), model(ids, mask), atol=0, rtol=0)


def test_initialisation_follows_bert() -> None:
    cfg = tiny()
    model = build_mlm(cfg)
    tokens = model.backbone.embeddings.tokens.weight
    assert torch.all(tokens[cfg.pad_token_id] == 0)
    assert abs(tokens[5:].std().item() - cfg.initializer_range) < 0.002
    assert torch.all(model.backbone.encoder.layers[0].attention.qkv.bias == 0)
    assert torch.all(model.backbone.embeddings.norm.weight == 1)


def test_segment_ids_change_the_output() -> None:
    model = build_mlm(tiny()).eval()
    ids, mask = padded_batch(V, [6])
    segments = torch.tensor([[0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, torch.zeros_like(ids)), model(ids, mask), atol=0, rtol=0)
        assert not torch.allclose(model(ids, mask, segments), model(ids, mask))


def test_sliding_windows_cover_the_document_with_overlap() -> None:
    from minibert.windows import sliding_windows

    ids = list(range(10, 30))  # 20 tokens
    windows = sliding_windows(ids, max_length=10, stride=5, cls_id=2, sep_id=3)
    assert all(w[0] == 2 and w[-1] == 3 and len(w) == 10 for w in windows)
    bodies = [w[1:-1] for w in windows]
    assert bodies[0] == ids[:8] and bodies[-1] == ids[-8:]
    assert sorted({t for b in bodies for t in b}) == ids
    assert sliding_windows([7, 8], 10, 5, 2, 3) == [[2, 7, 8, 3]]
    with pytest.raises(ValueError, match="stride must be in 1..8"):
        sliding_windows(ids, 10, 9, 2, 3)


@pytest.mark.parametrize("aggregate", ["mean", "max", "first"])
def test_document_prediction_aggregates_window_logits(aggregate: str) -> None:
    from minibert.inference import predict_documents, predict_logits
    from minibert.windows import sliding_windows

    by_hand = {"mean": lambda w: w.mean(axis=0), "max": lambda w: w.max(axis=0), "first": lambda w: w[0]}

    model = build_classifier(tiny(), ClassifierConfig()).eval()
    docs = [torch.randint(5, V, (n,)).tolist() for n in (40, 7, 25)]
    got = predict_documents(model, docs, max_length=16, stride=7, aggregate=aggregate, batch_size=4, cls_id=2, sep_id=3)
    assert got.shape == (3, 2)
    for doc, row in zip(docs, got):
        per_window = predict_logits(model, sliding_windows(doc, 16, 7, 2, 3), batch_size=8)
        np.testing.assert_allclose(row, by_hand[aggregate](per_window), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("native", [True, False])
def test_inference_runs_in_the_precision_asked_for(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """``precision="auto"`` scores under bf16 autocast only where bf16 is native (the teacher_logits
    stage and bf16 fine-tuning's validation); logits come back float32 and near the fp32 ones."""
    from minibert import precision
    from minibert.inference import predict_documents, predict_logits

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    torch.manual_seed(0)
    model = build_classifier(tiny(), ClassifierConfig()).eval()
    seen: list[torch.dtype] = []
    model.head.classifier.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    sequences = [torch.randint(5, V, (n,)).tolist() for n in (12, 5, 9, 16)]
    fp32 = predict_logits(model, sequences, batch_size=2)
    assert set(seen) == {torch.float32}
    seen.clear()
    auto = predict_logits(model, sequences, batch_size=2, precision="auto")
    assert auto.dtype == np.float32 and set(seen) == {torch.bfloat16 if native else torch.float32}
    np.testing.assert_allclose(auto, fp32, atol=0.05)
    assert (auto != fp32).any() == native  # bf16 rounds: the same logits only when it fell back to fp32
    seen.clear()
    predict_documents(model, [sequences[0] * 3], 16, 7, "mean", 4, 2, 3, precision="auto")
    assert set(seen) == {torch.bfloat16 if native else torch.float32}


def test_gradient_checkpointing_gives_the_same_loss_and_gradients() -> None:
    from minibert.model import set_gradient_checkpointing

    model = build_mlm(tiny(hidden_dropout=0.0, attention_dropout=0.0)).train()
    ids, mask = padded_batch(V, [9, 5])
    model(ids, mask).square().mean().backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    set_gradient_checkpointing(model, True)
    assert model.backbone.encoder.gradient_checkpointing
    model(ids, mask).square().mean().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain[name], atol=1e-6, rtol=1e-5)
