"""The inference runtime: raw text in, the same logits as the torch model read through the same
windows, labels and probabilities out; providers chosen as documented; bad settings refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import toy_classifier, toy_texts, toy_tokenizer

import minibert.runtime as runtime_module
from minibert.engines import execution_providers
from minibert.export import export_onnx
from minibert.quantize import quantize_onnx_embeddings_int8, quantize_onnx_int8
from minibert.runtime import (
    SINGLE_PROBES,
    RuntimeConfig,
    TextClassifier,
    Timing,
    fastest,
    probe_timing,
    smallest_of_fastest,
)
from minibert.validation import ConfigError
from pipeline.params import TaskParams
from pipeline.scoring import text_logits


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
    assert cuda.engine.handle.get_providers()[0] == "CUDAExecutionProvider"
    np.testing.assert_allclose(cuda.logits(texts), cpu.logits(texts), atol=1e-3)


# --- inference paths: OpenVINO, static int8, the parity record ----------------------------------------------------

from minibert.contract import Contract, Parity, Windows, onnx_parity, read_onnx_contract, stamp_onnx, stamp_parity  # noqa: E402
from minibert.engines import PORTABLE_PATH, available_paths, choose_path, load_engine  # noqa: E402
from minibert.files import ArtifactError  # noqa: E402
from minibert.quantize import quantize_onnx_static_int8  # noqa: E402
from minibert.tokenizer import PAD  # noqa: E402
from pipeline.task import text_windows  # noqa: E402

needs_openvino = pytest.mark.skipif("openvino/fp32" not in available_paths(), reason="openvino is not installed")
WINDOWS = Windows(16, 6, "mean")


def cut(tok, texts: list[str]) -> list[list[int]]:
    return text_windows(tok, texts, WINDOWS)[0]


@pytest.fixture(scope="module")
def stamped(setup, tmp_path_factory: pytest.TempPathFactory):
    """The toy model's portable graph and its static int8, each carrying a contract, and the torch logits."""
    model, tok, tok_path, paths, texts = setup
    tmp = tmp_path_factory.mktemp("paths")
    contract = Contract("classifier", None, WINDOWS, ("no", "yes"))
    fp32 = export_onnx(model, tmp / "fp32.onnx")
    stamp_onnx(fp32, contract)
    calibration = cut(tok, toy_texts(np.random.default_rng(5), [12] * 64))
    int8 = quantize_onnx_static_int8(fp32, tmp / "int8.onnx", calibration, tok.token_to_id(PAD))
    stamp_onnx(int8, contract)
    expected = text_logits(model, tok, WINDOWS, batch_size=8)(texts)
    return model, tok, tok_path, fp32, int8, texts, expected


def test_choose_path_takes_the_fastest_present_and_refuses_what_the_host_lacks() -> None:
    paths = available_paths()
    assert paths[-1] == PORTABLE_PATH and choose_path() == paths[0]
    assert choose_path("onnxruntime") == PORTABLE_PATH
    with pytest.raises(ValueError, match="bf16' runs on OpenVINO only"):
        choose_path("onnxruntime", "bf16")
    with pytest.raises(ValueError, match="runtime"):
        choose_path("tvm")


def test_static_int8_is_int8_and_stays_close_to_torch_on_every_path(stamped) -> None:
    import onnx

    _, tok, tok_path, _, int8, texts, expected = stamped
    ops = {node.op_type for node in onnx.load(str(int8)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops, "the QDQ format: int8 weights and activations"
    for path in available_paths():
        engine = load_engine(int8, path, threads=1)
        got = TextClassifier(tok, engine, RuntimeConfig(batch_size=8)).logits(texts)
        assert engine.path == path and got.shape == expected.shape
        assert not np.allclose(got, expected, atol=1e-5), f"{path}: int8 changes the numbers a little"
        assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max() + 0.05, path


def test_int8_embeddings_keep_each_row_to_half_a_step_and_the_answers_on_every_path(stamped, tmp_path) -> None:
    import onnx
    from onnx import numpy_helper

    _, tok, _, fp32, int8, texts, _ = stamped
    rows = tmp_path / "rows.onnx"
    converted = quantize_onnx_embeddings_int8(int8, rows, min_rows=tok.get_vocab_size())
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(int8)).graph.initializer}
    after = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(rows)).graph.initializer}
    tables = [name for name in before if name not in after]
    assert tables == converted and before[tables[0]].shape[0] == tok.get_vocab_size(), "the word embeddings, only them"
    table, q, scale = before[tables[0]], after[f"{tables[0]}.int8"], after[f"{tables[0]}.scale"]
    assert q.dtype == np.int8 and q.shape == table.shape and scale.shape == (table.shape[0], 1)
    assert np.abs(q.astype(np.float32) * scale - table).max() <= scale.max() / 2 + 1e-7
    nonzero = np.abs(table).max(axis=1) > 0
    assert (np.abs(q).max(axis=1)[nonzero] == 127).all(), "each row uses its full range"
    assert not q[~nonzero].any(), "the padding row stays zero"
    assert rows.stat().st_size < int8.stat().st_size - 0.7 * table.nbytes
    for path in available_paths():
        reference = TextClassifier(tok, load_engine(int8, path, threads=1), RuntimeConfig(batch_size=8)).logits(texts)
        got = TextClassifier(tok, load_engine(rows, path, threads=1), RuntimeConfig(batch_size=8)).logits(texts)
        assert not np.allclose(got, reference, atol=1e-6), f"{path}: the rows changed a little"
        np.testing.assert_allclose(got, reference, atol=0.05 * np.abs(reference).max() + 0.01, err_msg=path)
    # the toy vocabulary is under the default size
    assert quantize_onnx_embeddings_int8(fp32, tmp_path / "none.onnx") == []
    assert {i.name for i in onnx.load(str(tmp_path / "none.onnx")).graph.initializer} == {
        i.name for i in onnx.load(str(fp32)).graph.initializer}


@needs_openvino
@pytest.mark.parametrize("path", ["openvino/fp32", "onnxruntime/fp32"])
def test_small_calls_on_static_shapes_give_the_dynamic_answers(stamped, path: str) -> None:
    from minibert.batching import pad_ids
    from minibert.engines import STATIC_BATCHES, static_lengths

    _, tok, _, fp32, _, texts, _ = stamped
    pad = tok.token_to_id(PAD)
    windows = sorted(cut(tok, texts), key=len)  # 3 to 16 tokens
    dynamic = load_engine(fp32, path, threads=1)
    static = dynamic.with_static_shapes(WINDOWS.max_length, pad)
    assert (static is dynamic) == (path == PORTABLE_PATH), "ONNX Runtime gains nothing by it"
    assert static_lengths(128) == (16, 32, 64, 128) and static_lengths(100) == (16, 32, 64, 100)
    for rows in (1, 3, STATIC_BATCHES[-1], STATIC_BATCHES[-1] + 1):  # the last runs dynamic
        for start in (0, len(windows) - rows):  # the shortest windows (padded most), the longest
            ids, mask = pad_ids(windows[start:start + rows], pad)
            expected = dynamic(ids, mask)
            np.testing.assert_allclose(static(ids, mask), expected, atol=1e-5, err_msg=f"{rows} rows from {start}")
    long_ids, long_mask = pad_ids([list(range(5, 5 + 2 * WINDOWS.max_length))], pad)  # longer than any static shape
    np.testing.assert_allclose(static(long_ids, long_mask), dynamic(long_ids, long_mask), atol=1e-5)


@needs_openvino
def test_openvino_fp32_matches_onnx_runtime_on_the_portable_graph(stamped) -> None:
    _, tok, tok_path, fp32, _, texts, expected = stamped
    runtime = TextClassifier.from_files(tok_path, fp32, RuntimeConfig(runtime="openvino", precision="fp32", threads=1))
    assert runtime.path == "openvino/fp32" and runtime.labels == ("no", "yes")
    np.testing.assert_allclose(runtime.logits(texts), expected, atol=1e-4)


def with_record(stamped, tmp_path, verified: dict, tolerance: float, logits_shift: float = 0.0, agreement: float = 0.995,
                refused: dict | None = None):
    """A copy of the fp32 graph with a parity record: ``verified`` paths (and ``refused`` ones), every window of the
    texts as the probe."""
    import shutil

    model, tok, _, fp32, _, texts, _ = stamped
    graph = Path(shutil.copy(fp32, tmp_path / "recorded.onnx"))
    windows = cut(tok, texts)
    from minibert.inference import predict_logits

    probe = predict_logits(model.eval(), windows, batch_size=8, pad_id=tok.token_to_id(PAD)) + logits_shift
    stamp_parity(graph, Parity(verified, tuple(map(tuple, windows)), tuple(map(tuple, probe.tolist())),
                               {"fp32": tolerance, "bf16": tolerance}, agreement, refused or {}))
    return graph


def test_without_a_parity_record_auto_runs_the_portable_path(stamped) -> None:
    _, _, tok_path, fp32, *_ = stamped
    assert onnx_parity(load_engine(fp32).metadata, "fp32") is None
    assert TextClassifier.from_files(tok_path, fp32).path == PORTABLE_PATH


@needs_openvino
def test_auto_checks_an_unlisted_path_at_load_and_times_those_that_pass(stamped, tmp_path, caplog) -> None:
    # a random toy model's logits sit near ties, where bf16 may flip one: the check's limits are loose here
    graph = with_record(stamped, tmp_path, {PORTABLE_PATH: {"argmax_agreement": 1.0}}, tolerance=10.0, agreement=0.0)
    with caplog.at_level("INFO", logger="minibert.runtime"):
        runtime = TextClassifier.from_files(stamped[2], graph, RuntimeConfig(threads=1))
    for path in available_paths()[:-1]:
        assert f"passed its parity check on {path} here" in caplog.text
    timed = caplog.text.split("one window a call) ")[1].split(";")[0]
    assert all(f"'{path}'" in timed for path in available_paths()) and f"running on {runtime.path}" in caplog.text
    assert read_onnx_contract(graph).labels == ("no", "yes"), "the record sits beside the contract"


def test_auto_runs_on_the_path_measured_fastest(stamped, tmp_path, monkeypatch) -> None:
    import minibert.runtime as runtime_module

    graph = with_record(stamped, tmp_path, {p: {"argmax_agreement": 1.0} for p in available_paths()}, tolerance=1e-3)
    for slowest_first in (available_paths(), available_paths()[::-1]):
        seconds = {path: float(i + 1) for i, path in enumerate(reversed(slowest_first))}  # the last listed is fastest
        monkeypatch.setattr(runtime_module, "probe_timing",
                            lambda engine, *_, s=seconds: Timing(s[engine.path], s[engine.path]))
        assert TextClassifier.from_files(stamped[2], graph, RuntimeConfig(threads=1)).path == slowest_first[-1]


def test_fastest_settles_a_tie_in_batches_by_the_one_window_time() -> None:
    tie = {"openvino/fp32": Timing(1.00, 0.30), "openvino/bf16": Timing(0.95, 0.45), PORTABLE_PATH: Timing(2.0, 0.5)}
    assert fastest(tie) == "openvino/fp32"
    assert fastest({**tie, "openvino/bf16": Timing(0.95, 0.31)}) == "openvino/bf16"
    assert fastest({"a": Timing(1.0, 1.0), "b": Timing(3.0, 0.5)}) == "a", "2x on one window does not buy 3x in batches"


def test_the_smaller_graph_ships_where_the_timing_cannot_tell_them_apart() -> None:
    timings = {"int8 rows": Timing(1.10, 0.60), "fp32 rows": Timing(1.00, 0.56), "dynamic": Timing(2.0, 0.9)}
    sizes = {"int8 rows": 4_740_000, "fp32 rows": 16_960_000, "dynamic": 4_000_000}
    assert fastest(timings) == "fp32 rows"
    assert smallest_of_fastest(timings, sizes) == "int8 rows", "1.18x the least cost: a tie, the smaller graph ships"
    assert smallest_of_fastest({**timings, "int8 rows": Timing(1.5, 0.6)}, sizes) == "fp32 rows", "1.6x: speed wins"
    assert smallest_of_fastest(timings, sizes, tie=1.0) == "fp32 rows"
    assert smallest_of_fastest(timings, {**sizes, "int8 rows": 16_960_000}) == "fp32 rows", "same size: the faster"


@needs_openvino
def test_probe_timing_times_batches_and_single_windows_on_the_engine_it_is_given(stamped, tmp_path) -> None:
    import time

    graph = with_record(stamped, tmp_path, {PORTABLE_PATH: {"argmax_agreement": 1.0}}, tolerance=1e-3)
    engine = load_engine(graph, "openvino/fp32", threads=1)
    parity = onnx_parity(engine.metadata, str(graph))
    calls: list[int] = []

    def slowed(feed):  # 2 ms a call on top of the graph's own time
        calls.append(len(feed["input_ids"]))
        time.sleep(0.002)
        return engine.run(feed)

    timing = probe_timing(replace(engine, run=slowed), parity, 4, 0, repeats=2)
    windows, singles = len(parity.windows), min(SINGLE_PROBES, len(parity.windows))
    batch_calls = len(calls) - 3 * singles
    assert calls[batch_calls:] == [1] * (3 * singles), "three passes (a warm-up, two timed) one window a call"
    assert sum(calls[:batch_calls]) == 3 * windows and max(calls[:batch_calls]) == 4
    assert timing.single_s >= singles * 0.002 and timing.batch_s >= (batch_calls // 3) * 0.002
    assert timing.cost == timing.batch_s * timing.single_s


@needs_openvino
def test_an_unlisted_path_that_fails_its_check_is_dropped_under_auto_and_refused_when_named(stamped, tmp_path,
                                                                                            caplog) -> None:
    """The record's torch logits are shifted by 1: no path is within 1e-3 of them, so the check fails everywhere
    but the portable path, which the record lists (verified when the graph was written)."""
    graph = with_record(stamped, tmp_path, {PORTABLE_PATH: {"argmax_agreement": 1.0}}, tolerance=1e-3, logits_shift=1.0)
    with caplog.at_level("WARNING", logger="minibert.runtime"):
        runtime = TextClassifier.from_files(stamped[2], graph, RuntimeConfig(threads=1))
    assert runtime.path == PORTABLE_PATH
    assert "max |logit diff| 1 (limit 0.001)" in caplog.text and "leaving it out" in caplog.text
    with pytest.raises(ArtifactError, match=r"on openvino/fp32: argmax agreement 1.0000 .* max \|logit diff\| 1 "):
        TextClassifier.from_files(stamped[2], graph, RuntimeConfig(runtime="openvino", precision="fp32", threads=1))


@needs_openvino
def test_a_path_the_gate_refused_where_the_graph_was_built_is_left_out_and_refused_when_named(stamped, tmp_path,
                                                                                               caplog, monkeypatch) -> None:
    """The check's limits are loose (it would pass every path), but the record says the gate refused openvino/fp32
    on the test split: auto leaves it out without building its engine, and naming it is refused with the gate's
    numbers."""
    why = "argmax agreement 0.9966 (needs >= 0.995), accuracy -0.34 points (limit -0.3)"
    graph = with_record(stamped, tmp_path, {PORTABLE_PATH: {"argmax_agreement": 1.0}}, tolerance=10.0, agreement=0.0,
                        refused={"openvino/fp32": why})
    assert onnx_parity(load_engine(graph).metadata, "graph").refused == {"openvino/fp32": why}, "the record keeps it"
    built = []
    monkeypatch.setattr(runtime_module, "load_engine", lambda *a, **k: built.append(a[1]) or load_engine(*a, **k))
    with caplog.at_level("INFO", logger="minibert.runtime"):
        runtime = TextClassifier.from_files(stamped[2], graph, RuntimeConfig(threads=1))
    assert runtime.path != "openvino/fp32" and "the gate refused openvino/fp32 where it was built" in caplog.text
    assert PORTABLE_PATH in built and "openvino/fp32" not in built, f"engines built: {built}"
    with pytest.raises(ArtifactError, match=r"refused openvino/fp32 where it was built \(argmax agreement 0.9966"):
        TextClassifier.from_files(stamped[2], graph, RuntimeConfig(runtime="openvino", precision="fp32", threads=1))
    (tmp_path / "plain").mkdir()
    plain = with_record(stamped, tmp_path / "plain", {PORTABLE_PATH: {"argmax_agreement": 1.0}}, tolerance=10.0,
                        agreement=0.0)
    assert TextClassifier.from_files(stamped[2], plain, RuntimeConfig(runtime="openvino", precision="fp32",
                                                                      threads=1)).path == "openvino/fp32"


@needs_openvino
def test_a_listed_path_is_taken_without_a_check(stamped, tmp_path, caplog) -> None:
    """The record's logits are off by 1 everywhere, so a check would fail: a listed path is not checked again."""
    graph = with_record(stamped, tmp_path, {p: {"argmax_agreement": 1.0} for p in available_paths()}, tolerance=1e-3,
                        logits_shift=1.0)
    with caplog.at_level("INFO", logger="minibert.runtime"):
        runtime = TextClassifier.from_files(stamped[2], graph, RuntimeConfig(threads=1, runtime="openvino"))
    assert runtime.path.startswith("openvino/") and "leaving it out" not in caplog.text
    assert TextClassifier.from_files(stamped[2], graph, RuntimeConfig(runtime="openvino", precision="fp32")).path == (
        "openvino/fp32")


@needs_openvino
def test_openvino_cannot_read_ort_dynamic_int8_and_auto_falls_back(setup, tmp_path) -> None:
    """ORT's dynamic int8 of the fused graph holds QAttention, which OpenVINO's ONNX reader lacks."""
    model, tok, tok_path, paths, texts = setup
    graph = with_record((model, tok, tok_path, paths["int8"], None, texts, None), tmp_path,
                        {PORTABLE_PATH: {"argmax_agreement": 1.0}}, tolerance=1e-3)
    assert TextClassifier.from_files(tok_path, graph, RuntimeConfig(max_length=16, stride=6)).path == PORTABLE_PATH
    with pytest.raises(ArtifactError, match="does not load on openvino/fp32: .*QAttention"):
        TextClassifier.from_files(tok_path, graph, RuntimeConfig(max_length=16, stride=6, runtime="openvino",
                                                                 precision="fp32"))
