"""pretraining.run end to end on toy text: zero MLM steps leaves the count-based initialisation (word
vectors, unigram output bias); a collapsed encoder (the ``bias_init="zeros"`` ablation's risk) is flagged."""

import json
import warnings

import numpy as np
import pytest
import torch
from conftest import toy_texts, toy_tokenizer

from minibert import ModelConfig
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


def small(tok) -> ModelConfig:
    return ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                       max_positions=64)


def test_zero_steps_keeps_the_ppmi_vectors_and_reports_one_evaluation(toy) -> None:
    tok, texts = toy
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=64)
    history = RecordingTracker(NullTracker())
    model, metrics = pretraining.run(params(0, "ppmi_svd"), SHARED, cfg, tok, texts, history)
    ids, vectors, _ = pretraining.corpus_embeddings(pretraining.encode_documents(tok, texts), tok.get_vocab_size(),
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
    ids, vectors, _ = pretraining.corpus_embeddings(pretraining.encode_documents(tok, texts), tok.get_vocab_size(),
                                                 cfg.hidden_size, SHARED.seed)
    assert metrics["steps"] == 3 and np.isfinite(metrics["final_train_loss"])
    assert not torch.allclose(model.backbone.embeddings.tokens.weight[ids], vectors)


def test_unigram_bias_starts_the_decoder_at_the_corpus_frequencies_and_lowers_the_first_loss(toy) -> None:
    tok, texts = toy
    zeros_model, zeros = pretraining.run(params(0, "random"), SHARED, small(tok), tok, texts, NullTracker(),
                                         bias_init="zeros")
    model, unigram = pretraining.run(params(0, "random"), SHARED, small(tok), tok, texts, NullTracker())  # the default
    docs = [np.asarray(d, dtype=np.int64) for d in pretraining.encode_documents(tok, texts)]
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
