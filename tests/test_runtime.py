"""The inference runtime: raw text in, the same logits as the torch model read through the same
windows, labels and probabilities out; providers chosen as documented; bad settings refused."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import toy_classifier, toy_texts, toy_tokenizer

from minibert.export import execution_providers, export_onnx
from minibert.quantize import quantize_onnx_int8
from minibert.runtime import RuntimeConfig, TextClassifier
from minibert.validation import ConfigError
from pipeline.params import TaskParams
from pipeline.task import text_logits


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("runtime")
    tok, tok_path = toy_tokenizer(tmp)
    model = toy_classifier(tok)
    paths = {"plain": export_onnx(model, tmp / "plain.onnx"),
             "fused": export_onnx(model, tmp / "fused.onnx", fused_attention=True),
             "segments": export_onnx(model, tmp / "segments.onnx", with_token_types=True)}
    paths["int8"] = quantize_onnx_int8(paths["fused"], tmp / "int8.onnx")
    texts = toy_texts(np.random.default_rng(1), (0, 3, 15, 40, 90))  # empty to many windows
    return model, tok, tok_path, paths, texts


@pytest.mark.parametrize("graph", ["plain", "fused", "segments"])
@pytest.mark.parametrize("aggregate", ["mean", "max", "first"])
def test_runtime_logits_equal_torch_through_the_same_windows(setup, graph: str, aggregate: str) -> None:
    model, tok, tok_path, paths, texts = setup
    cfg = RuntimeConfig(max_length=16, stride=6, aggregate=aggregate, batch_size=3, threads=1)
    runtime = TextClassifier.from_files(tok_path, paths[graph], cfg)
    expected = text_logits(model, tok, TaskParams(max_length=16, stride=6, aggregate=aggregate), batch_size=8)(texts)
    np.testing.assert_allclose(runtime.logits(texts), expected, atol=1e-4, rtol=0)


def test_the_int8_graph_runs_through_the_runtime_close_to_fp32(setup) -> None:
    _, _, tok_path, paths, texts = setup
    cfg = RuntimeConfig(max_length=16, stride=6)
    fp32 = TextClassifier.from_files(tok_path, paths["fused"], cfg).logits(texts)
    int8 = TextClassifier.from_files(tok_path, paths["int8"], cfg).logits(texts)
    assert int8.shape == fp32.shape and not np.array_equal(int8, fp32), "int8 weights change the numbers a little"
    assert np.abs(int8 - fp32).max() < 0.1 * np.abs(fp32).max() + 0.05


def test_predict_gives_labels_and_probabilities(setup) -> None:
    _, _, tok_path, paths, texts = setup
    runtime = TextClassifier.from_files(tok_path, paths["fused"], RuntimeConfig(max_length=16, stride=6))
    out = runtime.predict(texts)
    assert out.labels.dtype == np.int64 and out.labels.tolist() == runtime.logits(texts).argmax(1).tolist()
    assert out.probabilities.shape == (len(texts), 2)
    np.testing.assert_allclose(out.probabilities.sum(1), 1.0, atol=1e-6)
    empty = runtime.predict([])
    assert empty.labels.shape == (0,) and empty.probabilities.shape == (0, 2)
    with pytest.raises(TypeError, match="not one string"):
        runtime.predict("a single string")
    # The order of texts does not change any text's answer (length sorting is internal).
    np.testing.assert_allclose(runtime.logits(texts[::-1])[::-1], runtime.logits(texts), atol=1e-6)


@pytest.mark.parametrize("overrides, key", [
    ({"stride": 15}, "stride"), ({"max_length": 2}, "max_length"), ({"aggregate": "median"}, "aggregate"),
    ({"device": "tpu"}, "device"), ({"optimization": "max"}, "optimization"), ({"threads": -1}, "threads"),
    ({"batch_size": "32"}, "batch_size"),
])
def test_bad_runtime_settings_name_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        RuntimeConfig(**{"max_length": 16, "stride": 6, **overrides})


def test_execution_providers_prefer_accelerators_and_refuse_missing_ones() -> None:
    cpu = "CPUExecutionProvider"
    gpu = {"TensorrtExecutionProvider", "CUDAExecutionProvider", cpu}
    assert execution_providers("cpu", gpu) == [cpu]
    assert execution_providers("auto", gpu) == ["TensorrtExecutionProvider", "CUDAExecutionProvider", cpu]
    assert execution_providers("auto", {cpu}) == [cpu]
    assert execution_providers("cuda", {"CUDAExecutionProvider", cpu}) == ["CUDAExecutionProvider", cpu]
    with pytest.raises(ValueError, match="onnxruntime-gpu"):
        execution_providers("tensorrt", {"CUDAExecutionProvider", cpu})
    with pytest.raises(ValueError, match="device"):
        execution_providers("npu", {cpu})


def test_cuda_runtime_matches_cpu(setup) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider in this onnxruntime build")
    _, _, tok_path, paths, texts = setup
    cpu = TextClassifier.from_files(tok_path, paths["plain"], RuntimeConfig(max_length=16, stride=6))
    cuda = TextClassifier.from_files(tok_path, paths["plain"], RuntimeConfig(max_length=16, stride=6, device="cuda"))
    assert cuda.session.get_providers()[0] == "CUDAExecutionProvider"
    np.testing.assert_allclose(cuda.logits(texts), cpu.logits(texts), atol=1e-3)
