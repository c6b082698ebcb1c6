"""pretrain.run end to end on toy text: zero MLM steps leaves the count-based initialisation."""

import json

import numpy as np
import pytest
import torch
from conftest import toy_texts, toy_tokenizer

from minibert import ModelConfig
from minibert.train_config import PPMIConfig
from minibert.trainer import NullTracker, RecordingTracker
from pipeline.params import PretrainParams
from pipeline.stages import pretrain


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    tok, _ = toy_tokenizer(tmp_path_factory.mktemp("tok"))
    return tok, toy_texts(np.random.default_rng(1), [30] * 200)


def params(max_steps: int, embedding_init: str) -> PretrainParams:
    return PretrainParams(max_length=32, batch_size=8, max_steps=max_steps, eval_rows=16, log_every=1,
                          embedding_init=embedding_init, ppmi=PPMIConfig(window=2, max_tokens=100))


def test_zero_steps_keeps_the_ppmi_vectors_and_reports_one_evaluation(toy) -> None:
    tok, texts = toy
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=64)
    history = RecordingTracker(NullTracker())
    model, metrics = pretrain.run(params(0, "ppmi_svd"), cfg, tok, texts, history)
    ids, vectors, _ = pretrain.corpus_embeddings(pretrain.encode_documents(tok, texts), tok.get_vocab_size(),
                                                 cfg.hidden_size, params(0, "ppmi_svd"))
    assert metrics["steps"] == 0 and metrics["train_seconds"] == 0.0 and metrics["approx_tokens_seen"] == 0.0
    torch.testing.assert_close(model.backbone.embeddings.tokens.weight[ids], vectors)
    assert 0.0 <= metrics["mlm_accuracy"] <= 1.0 and np.isfinite(metrics["mlm_loss"])
    assert [step for step, _ in history.series("eval_mlm_loss")] == [0]
    assert "final_train_loss" not in metrics  # no step, no training loss
    json.dumps(metrics, allow_nan=False)  # the metrics file stays strict JSON (a NaN raises here)


def test_some_steps_move_the_vectors(toy) -> None:
    tok, texts = toy
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=64)
    model, metrics = pretrain.run(params(3, "ppmi_svd"), cfg, tok, texts, NullTracker())
    ids, vectors, _ = pretrain.corpus_embeddings(pretrain.encode_documents(tok, texts), tok.get_vocab_size(),
                                                 cfg.hidden_size, params(3, "ppmi_svd"))
    assert metrics["steps"] == 3 and np.isfinite(metrics["final_train_loss"])
    assert not torch.allclose(model.backbone.embeddings.tokens.weight[ids], vectors)
