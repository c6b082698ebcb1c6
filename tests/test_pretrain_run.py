"""pretraining.run end to end on toy text: zero MLM steps leaves the count-based initialisation (word
vectors, unigram output bias, counted over the training documents only); the held-out measurement stays
fixed whatever the training section says; packed rows and the packed step; a collapsed encoder (the
``bias_init="zeros"`` ablation's risk) is flagged."""

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch
from conftest import toy_texts, toy_tokenizer

from minibert import ModelConfig
from minibert.attention import eager_attention, sdpa_attention
from minibert.embedding_init import unigram_log_probs
from minibert.trainer import NullTracker, RecordingTracker
from pipeline import pretraining
from pipeline.params import PretrainParams, TrainParams


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    tok, _ = toy_tokenizer(tmp_path_factory.mktemp("tok"))
    return tok, toy_texts(np.random.default_rng(1), [30] * 200)


SHARED = TrainParams(log_every=1)


def params(max_steps: int, embedding_init: str) -> PretrainParams:
    return PretrainParams(max_length=32, batch_size=8, max_steps=max_steps, time_budget_min=None,
                          embedding_init=embedding_init)


def training_docs(tok, texts) -> list[list[int]]:
    """The documents pretraining trains on (and counts its vectors over): all but the held-out ones."""
    encoded = pretraining.encode_documents(tok, texts)
    length = min(pretraining.EVAL_LENGTH, 64)  # the toy models' max_positions cap the held-out sequences
    _, train = pretraining.split_held_out(encoded, length, tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"))
    return [encoded[i] for i in train]


def small(tok) -> ModelConfig:
    return ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                       max_positions=64)


def test_zero_steps_keeps_the_ppmi_vectors_and_reports_one_evaluation(toy) -> None:
    tok, texts = toy
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=64)
    history = RecordingTracker(NullTracker())
    model, metrics = pretraining.run(params(0, "ppmi_svd"), SHARED, cfg, tok, texts, history)
    ids, vectors, _ = pretraining.corpus_embeddings(training_docs(tok, texts), tok.get_vocab_size(),
                                                 cfg.hidden_size, SHARED.seed)
    assert metrics["steps"] == 0 and metrics["train_seconds"] == 0.0 and metrics["approx_tokens_seen"] == 0.0
    torch.testing.assert_close(model.backbone.embeddings.tokens.weight[ids], vectors)
    assert 0.0 <= metrics["mlm_accuracy"] <= 1.0 and np.isfinite(metrics["mlm_loss"])
    assert [step for step, _ in history.series("eval_mlm_loss")] == [0]
    assert "final_train_loss" not in metrics  # no step, no training loss
    json.dumps(metrics, allow_nan=False)  # the metrics file stays strict JSON (a NaN raises here)


def test_some_steps_move_the_vectors(toy) -> None:
    tok, texts = toy
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=64)
    model, metrics = pretraining.run(params(3, "ppmi_svd"), SHARED, cfg, tok, texts, NullTracker())
    ids, vectors, _ = pretraining.corpus_embeddings(training_docs(tok, texts), tok.get_vocab_size(),
                                                 cfg.hidden_size, SHARED.seed)
    assert metrics["steps"] == 3 and np.isfinite(metrics["final_train_loss"])
    assert not torch.allclose(model.backbone.embeddings.tokens.weight[ids], vectors)


def test_unigram_bias_starts_the_decoder_at_the_corpus_frequencies_and_lowers_the_first_loss(toy) -> None:
    tok, texts = toy
    zeros_model, zeros = pretraining.run(params(0, "random"), SHARED, small(tok), tok, texts, NullTracker(),
                                         bias_init="zeros")
    model, unigram = pretraining.run(params(0, "random"), SHARED, small(tok), tok, texts, NullTracker())  # the default
    docs = [np.asarray(d, dtype=np.int64) for d in training_docs(tok, texts)]
    torch.testing.assert_close(model.head.bias, unigram_log_probs(docs, tok.get_vocab_size()))
    assert not zeros_model.head.bias.any()
    # same seed, same encoder and eval batches: only the bias differs, and it is the unigram solution
    assert unigram["mlm_loss"] < zeros["mlm_loss"] - 0.5
    assert unigram["token_spread"] == pytest.approx(zeros["token_spread"]) and unigram["token_spread"] > 0.1
    assert not unigram["collapsed"]


def test_a_collapsed_encoder_is_flagged_with_a_warning_that_names_the_fix(toy, monkeypatch) -> None:
    tok, texts = toy
    build = pretraining.build_mlm

    def collapsed(cfg: ModelConfig):
        model = build(cfg)
        with torch.no_grad():  # the last LayerNorm's gain at 0: every token's final state is its bias
            model.backbone.encoder.layers[-1].feed_forward_norm.weight.zero_()
        return model

    monkeypatch.setattr(pretraining, "build_mlm", collapsed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, metrics = pretraining.run(params(0, "random"), SHARED, small(tok), tok, texts, NullTracker(), bias_init="zeros")
    assert metrics["collapsed"] and metrics["token_spread"] < 1e-6
    assert any("collapsed" in str(w.message) and "pretrain.lr" in str(w.message) for w in caught)


def test_the_held_out_measurement_does_not_move_with_the_training_section(toy) -> None:
    """Sequence length, masking rate, packing and dropout change how the encoder trains, not what it is measured on:
    at zero steps (the same initialisation) every variant reads the same held-out numbers."""
    tok, texts = toy
    base = params(0, "ppmi_svd")
    variants = [base, dataclasses.replace(base, max_length=16, mlm_probability=0.4),
                dataclasses.replace(base, packing=False, dropout=None, batch_size=4)]
    results = [pretraining.run(v, SHARED, small(tok), tok, texts, NullTracker())[1] for v in variants]
    keys = ("mlm_accuracy", "mlm_loss", "eval_sequences", "eval_masked_tokens", "train_documents")
    assert all({k: r[k] for k in keys} == {k: results[0][k] for k in keys} for r in results[1:])
    assert results[0]["eval_max_length"] == min(pretraining.EVAL_LENGTH, 64) and results[0]["eval_mask_probability"] == 0.15
    # another training seed: other training batches, the same held-out documents
    other = pretraining.run(base, TrainParams(log_every=1, seed=5), small(tok), tok, texts, NullTracker())[1]
    assert other["eval_masked_tokens"] == results[0]["eval_masked_tokens"]


def test_held_out_documents_are_never_trained_on(toy) -> None:
    tok, texts = toy
    encoded = pretraining.encode_documents(tok, texts)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    held, train = pretraining.split_held_out(encoded, 32, cls_id, sep_id)
    assert len(held) == min(pretraining.EVAL_ROWS, len(held)) and all(len(s) <= 32 and s[0] == cls_id for s in held)
    held_docs = sorted(set(range(len(encoded))) - set(train.tolist()))
    assert 0 < len(held_docs) <= pretraining.EVAL_SHARE * len(encoded)  # at most a tenth of the corpus
    pieces = {tuple(s[1:-1]) for s in held}
    chunks = {tuple(c[1:-1]) for i in held_docs for c in pretraining.chunk_document(encoded[i], 32, cls_id, sep_id)}
    assert pieces <= chunks  # every held-out sequence comes from a held-out document
    assert pretraining.split_held_out(encoded, 32, cls_id, sep_id)[0] == held  # fixed: the same on every call
    with pytest.raises(ValueError, match="at least 2"):
        pretraining.split_held_out(encoded[:1], 32, cls_id, sep_id)


def test_packed_rows_are_the_shuffled_documents_run_on_with_separators() -> None:
    docs = [[10, 11, 12], [20], [], [30, 31, 32, 33, 34]]
    rows = pretraining.pack_rows(docs, 4, seed=3, cls_id=2, sep_id=3)
    order = np.random.default_rng(3).permutation(len(docs))
    stream = [t for i in order if docs[i] for t in (*docs[i], 3)]  # 12 tokens: 4 rows of [CLS] + 3
    assert rows.shape == (4, 4) and rows.dtype == np.int32 and (rows[:, 0] == 2).all()
    assert rows[:, 1:].flatten().tolist() == stream[:12]
    assert pretraining.pack_rows(docs, 6, seed=3, cls_id=2, sep_id=3).shape == (2, 6)  # the short tail is dropped
    with pytest.raises(ValueError, match="fewer than one packed row"):
        pretraining.pack_rows([[5]], 8, seed=0, cls_id=2, sep_id=3)


def test_training_rows_follow_the_sections_packing_and_pick_the_matching_step() -> None:
    """Packed: pack_rows and the maskless step. Unpacked: each document's [CLS] piece [SEP] pieces in the seed's order,
    stopping once ``needed`` exist (after the block of documents that reached it), and the padded step."""
    docs = [[10 + i, 20 + i, 30 + i, 40 + i, 50 + i] for i in range(3000)]
    packed = PretrainParams(max_length=4, batch_size=2, max_steps=5)
    rows = pretraining.training_rows(docs, packed, 7, 2, 3)
    np.testing.assert_array_equal(rows, pretraining.pack_rows(docs, 4, 7, 2, 3))
    assert pretraining.training_step(packed) is pretraining.packed_mlm_step
    unpacked = dataclasses.replace(packed, packing=False)
    pieces = pretraining.training_rows(docs, unpacked, 7, 2, 3)  # 5 x 2 needed: the first block of 2048 documents
    order = np.random.default_rng(7).permutation(len(docs))
    expected = [piece for i in order[:2048] for piece in ([2, *docs[i][:2], 3], [2, *docs[i][2:4], 3], [2, docs[i][4], 3])]
    assert pieces == expected
    assert len(pretraining.training_rows(docs, unpacked, 7, 2, 3, needed=7000)) == 3 * len(docs)  # the corpus runs out
    assert pretraining.training_step(unpacked) is pretraining.mlm_step


def test_the_packed_step_is_the_padded_step_on_rows_without_padding(toy) -> None:
    """No attention mask (SDPA's fused kernels) gives what an all-ones mask gives, loss and gradients, in fp32 eager."""
    tok, texts = toy
    torch.manual_seed(0)
    model = pretraining.build_mlm(dataclasses.replace(small(tok), hidden_dropout=0.0, attention_dropout=0.0)).train()
    rows = pretraining.pack_rows(training_docs(tok, texts), 32, 0, 2, 3)
    batch = next(pretraining.batch_stream(rows, params(1, "random"), tok.get_vocab_size(), 0))
    assert batch[0].shape == (8, 32) and bool(batch[1].all()) and len(batch[2]) > 0
    grads = []
    for step in (pretraining.packed_mlm_step, pretraining.mlm_step):
        model.zero_grad()
        loss, tokens = step(model, batch)
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        assert int(tokens) == 8 * 32
    for packed, padded in zip(*grads, strict=True):
        torch.testing.assert_close(packed, padded, rtol=1e-4, atol=1e-6)


def test_pretraining_dropout_and_attention_core_are_the_sections_where_it_sets_them(toy) -> None:
    """They change how the encoder trains, not its weights: the stage saves it with the model section's config."""
    tok, texts = toy
    model, _ = pretraining.run(dataclasses.replace(params(1, "random"), dropout=0.0, attention="eager"), SHARED, small(tok),
                               tok, texts, NullTracker())
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert all(layer.attention.core is eager_attention for layer in model.backbone.encoder.layers)
    model, _ = pretraining.run(dataclasses.replace(params(1, "random"), dropout=None, attention=None), SHARED, small(tok),
                               tok, texts, NullTracker())
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {small(tok).hidden_dropout}
    assert all(layer.attention.core is sdpa_attention for layer in model.backbone.encoder.layers)


def test_pretraining_follows_its_own_schedule_clock_where_it_sets_one() -> None:
    shared = TrainParams(schedule_clock="steps", grad_clip=0.5)
    optim = PretrainParams(lr=0.002, warmup_ratio=0.1, schedule_clock="budget").optim(shared)
    assert (optim.schedule_clock, optim.lr, optim.warmup_ratio, optim.grad_clip) == ("budget", 0.002, 0.1, 0.5)
    assert PretrainParams(schedule_clock=None).optim(shared).schedule_clock == "steps"
