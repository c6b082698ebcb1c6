"""The quantize stage's ``run``: it deploys the fastest candidate graph that passed the gate, stamped with the paths it
passed on and its temperature, and refuses with the numbers when not even the student's fp32 graph matches the
student."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import toy_classifier, toy_texts, toy_tokenizer
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from minibert.contract import Contract, Windows, onnx_parity, read_onnx_contract, stamp_onnx
from minibert.engines import PORTABLE_PATH, load_engine
from minibert.export import export_onnx
from pipeline import deployment
from pipeline.deployment import TIERS, compare
from pipeline.io import StageError
from pipeline.params import QuantizeParams
from pipeline.scoring import text_logits, validation
from pipeline.stages import quantize
from pipeline.stages.quantize import KINDS, Inputs, run

WINDOWS = Windows(16, 6, "mean")
CONTRACT = Contract("classifier", None, WINDOWS, ("no", "yes"))


def split(model, tok, rng, lengths) -> pd.DataFrame:
    """Word salads labelled with ``model``'s own answers: a graph that keeps them loses no accuracy."""
    texts = toy_texts(rng, lengths)
    return pd.DataFrame({"text": texts, "label": text_logits(model, tok, WINDOWS, batch_size=8)(texts).argmax(1)})


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("quantize_stage")
    tok, _ = toy_tokenizer(tmp)
    model = toy_classifier(tok)
    portable = export_onnx(model, tmp / "student.onnx")
    fused = export_onnx(model, tmp / "student_fused.onnx", fused_attention=True)
    for graph in (portable, fused):
        stamp_onnx(graph, CONTRACT)
    rng = np.random.default_rng(3)
    train, val, test = (split(model, tok, rng, lengths) for lengths in ([8, 12, 20] * 30, [6, 11, 25] * 12, [5, 9, 30] * 16))
    return Inputs(tok, model, CONTRACT, train, val, test, portable, fused)


def test_the_deployed_graph_is_one_candidate_that_passed_stamped_with_its_paths_and_temperature(toy, tmp_path) -> None:
    out = run(QuantizeParams(calibration_texts=40), toy, tmp_path, threads=1, seed=0)
    metrics = out.metrics
    kinds = [kind for kind in ("static", "dynamic", "fp32") if metrics[f"deployed_{kind}"] == 1.0]
    assert len(kinds) == 1 and out.graph.parent == tmp_path and out.graph.stem in KINDS
    assert out.graph.stem.startswith(kinds[0]) and metrics["calibration_texts"] == 40
    engine = load_engine(out.graph, PORTABLE_PATH, threads=1)
    contract = read_onnx_contract(out.graph)
    assert contract.windows == WINDOWS and contract.temperature == pytest.approx(metrics["temperature"])
    parity = onnx_parity(engine.metadata, "deployed")
    assert PORTABLE_PATH in parity.verified and metrics["paths_verified"] == len(parity.verified)
    assert parity.refused == metrics["refused_paths"]
    for path, result in parity.verified.items():  # what the record says is what the gate measured, path by path
        assert result["argmax_agreement"] >= parity.min_agreement
        assert metrics[f"test_{path.replace('/', '_')}_argmax_agreement"] == result["argmax_agreement"]
    tiers = {"+".join(ops) + ("+embedding rows" if rows else "") for ops, rows in TIERS}
    assert set(metrics["int8_passed_over"]) <= tiers | {"dynamic"}
    assert metrics["onnx_int8_mb"] == pytest.approx(out.graph.stat().st_size / 1e6)
    # the deployed graph's own answers against the student's on validation, whichever kind it is
    val_logits, val_labels, _ = validation(toy.tok, toy.val, WINDOWS)
    on_val = compare(val_logits(lambda ids, mask: torch.from_numpy(engine(ids, mask))), val_logits(toy.student), val_labels)
    assert {key: metrics[f"val_int8_{key}"] for key in on_val} == pytest.approx(on_val)
    # the torch int8 student: its Linear layers dynamic int8, the student's own left fp32
    assert metrics["int8_mb"] < metrics["fp32_mb"]
    assert any(isinstance(m, DynamicQuantizedLinear) for m in out.int8.modules())
    assert not any(isinstance(m, nn.Linear) for m in out.int8.modules()) and any(isinstance(m, nn.Linear) for m in toy.student.modules())


def test_a_static_graph_deployed_is_scored_on_validation_once_and_its_numbers_are_its_own(toy, tmp_path,
                                                                                          monkeypatch) -> None:
    """Static int8 is scored on validation while its tier is chosen; deployed, those logits are the ones its
    metrics and temperature come from (the graph is not read a second time), and they are the deployed file's."""
    monkeypatch.setattr(deployment, "MIN_AGREEMENT", 0.9)  # the toy's static int8 flips 1 of 48 test answers
    monkeypatch.setattr(deployment, "MAX_ACCURACY_DROP", 0.05)
    monkeypatch.setattr(quantize, "fastest_graph", lambda graphs, verified, *args: ("static", {}))
    scored: list[str] = []  # the bytes of each graph the stage scores on validation

    def loading(graph, path, threads):
        scored.append(hashlib.sha256(graph.read_bytes()).hexdigest())
        return load_engine(graph, path, threads=threads)

    monkeypatch.setattr(quantize, "load_engine", loading)
    out = run(QuantizeParams(calibration_texts=40), toy, tmp_path, threads=1, seed=0)
    assert out.graph.name == "static.onnx" and out.metrics["deployed_static"] == 1.0
    assert len(scored) == len(set(scored)) == 2, "the static graph and the portable fp32 one, once each"
    val_logits, val_labels, _ = validation(toy.tok, toy.val, WINDOWS)
    engine = load_engine(out.graph, PORTABLE_PATH, threads=1)
    on_val = compare(val_logits(lambda ids, mask: torch.from_numpy(engine(ids, mask))), val_logits(toy.student), val_labels)
    assert {key: out.metrics[f"val_int8_{key}"] for key in on_val} == pytest.approx(on_val)


def test_a_graph_that_is_not_the_students_is_refused_with_the_numbers(toy, tmp_path) -> None:
    other = toy_classifier(toy.tok)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p))  # another model: every candidate built from its graph disagrees with the student
    foreign = export_onnx(other, tmp_path / "foreign.onnx")
    stamp_onnx(foreign, CONTRACT)
    inputs = Inputs(toy.tok, toy.student, CONTRACT, toy.train, toy.val, toy.test, foreign, foreign)
    (tmp_path / "work").mkdir()
    with pytest.raises(StageError, match=rf"fp32\.onnx on {PORTABLE_PATH} against torch fp32 on 48 test texts: argmax agreement"):
        run(QuantizeParams(calibration_texts=20), inputs, tmp_path / "work", threads=1, seed=0)

