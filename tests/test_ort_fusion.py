"""Fused-attention export for ONNX Runtime: one Attention node a layer, the same logits as torch at
any batch and length (padding included), ORT's optimiser on top, int8 on top of that."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, SequenceClassifier, build_classifier
from minibert.attention import SelfAttention
from minibert.engines import load_session, onnx_logits
from minibert.export import export_onnx
from minibert.ort_fusion import _fused_forward, _OrtAttention, fused_attention, fused_operator_counts, optimize_for_ort
from minibert.quantize import quantize_onnx_int8

VOCAB = 300
LENGTH_SETS = [[3, 11, 2, 9, 1], [30], [1, 1, 1], [64, 17, 40]]


def classifier(**overrides: object) -> SequenceClassifier:
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=VOCAB, num_layers=3, num_heads=4, **overrides)
    return build_classifier(cfg, ClassifierConfig(pooling="mean")).eval()


@pytest.fixture(scope="module")
def model() -> SequenceClassifier:
    return classifier()


@pytest.fixture(scope="module")
def graphs(model: SequenceClassifier, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fused")
    fused = export_onnx(model, folder / "fused.onnx", fused_attention=True)
    optimize_for_ort(fused, folder / "optimized.onnx", num_heads=4, hidden_size=128)
    quantize_onnx_int8(fused, folder / "int8.onnx")  # the pipeline's default path (export.ort_optimizer: false)
    quantize_onnx_int8(folder / "optimized.onnx", folder / "optimized_int8.onnx")
    return {"fused": fused, "optimized": folder / "optimized.onnx", "int8": folder / "int8.onnx",
            "optimized_int8": folder / "optimized_int8.onnx"}


def test_each_layer_exports_one_attention_node(graphs: dict[str, Path]) -> None:
    fused, optimized = fused_operator_counts(graphs["fused"]), fused_operator_counts(graphs["optimized"])
    assert fused["Attention"] == 3 and "Softmax" not in fused, "attention maths left unfused"
    assert optimized["Attention"] == 3
    assert optimized["SkipLayerNormalization"] >= 5 and optimized.get("BiasGelu", 0) == 3
    for graph in ("int8", "optimized_int8"):
        assert fused_operator_counts(graphs[graph]).get("QAttention", 0) == 3, f"{graph}: int8 attention projections"


@pytest.mark.parametrize("graph", ["fused", "optimized"])
@pytest.mark.parametrize("lengths", LENGTH_SETS, ids=lambda ls: f"B{len(ls)}xT{max(ls)}")
def test_fused_graphs_match_torch_on_padded_batches(model, graphs, graph: str, lengths: list[int]) -> None:
    ids, mask = padded_batch(VOCAB, lengths)
    with torch.no_grad():
        expected = model(ids, mask).numpy()
    got = onnx_logits(load_session(graphs[graph], threads=2), ids, mask)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("graph", ["int8", "optimized_int8"])
def test_fused_int8_stays_close_to_fp32(model, graphs, graph: str) -> None:
    ids, mask = padded_batch(VOCAB, [12, 30, 5, 22])
    with torch.no_grad():
        expected = model(ids, mask).numpy()
    got = onnx_logits(load_session(graphs[graph], threads=2), ids, mask)
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max() + 0.05


def test_the_fused_module_runs_while_patched_and_is_restored_after(model, monkeypatch) -> None:
    calls = []
    original = _OrtAttention.apply
    monkeypatch.setattr(_OrtAttention, "apply", lambda *a: calls.append(1) or original(*a))
    attention = [m for m in model.modules() if isinstance(m, SelfAttention)]
    ids, mask = padded_batch(VOCAB, [9, 4, 16])
    with torch.no_grad():
        expected = model(ids, mask)
        with fused_attention(model):
            with fused_attention(model):  # nested blocks restore what they found
                pass
            assert all(m.forward.__func__ is _fused_forward for m in attention)
            got = model(ids, mask)
        assert len(calls) == 3, "one fused call a layer"
        assert all("forward" not in m.__dict__ for m in attention), "class forward back"
        torch.testing.assert_close(model(ids, mask), expected, atol=0, rtol=0)
        assert len(calls) == 3
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    with fused_attention(model.train()), pytest.raises(RuntimeError, match="inference export"):
        model(ids, mask)
    model.eval()


def test_rotary_models_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rotary"):
        export_onnx(classifier(position="rotary"), tmp_path / "r.onnx", fused_attention=True)
    assert not (tmp_path / "r.onnx").exists()
