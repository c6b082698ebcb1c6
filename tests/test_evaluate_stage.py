"""The evaluate stage's exported variants: each speed number names the inference path it was measured on (``auto``
picks a path for the batched classifier and again for the one-thread copy that measures latency)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import toy_classifier, toy_texts, toy_tokenizer

from minibert.contract import Contract, Windows, stamp_onnx, stamp_parity
from minibert.engines import available_paths
from minibert.export import export_onnx
from pipeline.deployment import parity_record
from pipeline.stages.evaluate import measure, onnx_variant

WINDOWS = Windows(16, 6, "mean")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("evaluate_stage")
    tok, tok_path = toy_tokenizer(tmp)
    model = toy_classifier(tok)
    path = export_onnx(model, tmp / "student.onnx")
    stamp_onnx(path, Contract("classifier", None, WINDOWS, ("no", "yes")))
    # a record that lists every path here, as the gate writes it: `auto` and `openvino` may pick among them
    texts = toy_texts(np.random.default_rng(1), [6, 20] * 8)
    stamp_parity(path, parity_record(model, tok, texts, WINDOWS, {p: {"argmax_agreement": 1.0} for p in available_paths()}))
    return tok_path, path


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino", "auto"])
def test_an_exported_variant_names_the_path_of_its_throughput_and_of_its_latency(graph, runtime: str) -> None:
    if runtime == "openvino" and "openvino/fp32" not in available_paths():
        pytest.skip("openvino is not installed")
    tok_path, path = graph
    variant = onnx_variant("deployed", path, tok_path, threads=2, runtime=runtime)
    if runtime != "auto":
        assert variant.engine_path.startswith(runtime) and variant.latency_engine_path.startswith(runtime)
    texts = toy_texts(np.random.default_rng(0), [5, 9, 30] * 4)
    metrics = measure(variant, texts, np.arange(len(texts)) % 2, threads=2).metrics
    for prefix, engine_path in (("", variant.engine_path), ("latency_", variant.latency_engine_path)):
        assert metrics[f"{prefix}openvino"] == float(engine_path.startswith("openvino/"))
        assert metrics[f"{prefix}bf16_inference"] == float(engine_path.endswith("/bf16"))
    assert metrics["p50_ms"] > 0 and metrics["throughput_per_s"] > 0
