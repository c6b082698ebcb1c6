"""ONNX export: torch vs ONNX Runtime parity at shapes unlike the export example, graph I/O,
atomic writes, token-type input, session options.

The export example is batch 2 x 8 tokens (``minibert.export.example_inputs``); every parity
check below uses other batch sizes and lengths, so a graph frozen to the example shape fails.
Tolerance 1e-4 absolute: measured max |torch - ORT| is about 4e-8 (float32 round-off).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, SequenceClassifier, build_classifier
from minibert import export as export_mod
from minibert.engines import OPTIMIZATION_LEVELS, load_session, onnx_logits
from minibert.export import export_onnx, parity

VOCAB = 300
ATOL = 1e-4
# (lengths of the rows) -> batch B = len, sequence T = max; none is the (2, 8) export example.
LENGTH_SETS = [[3, 11, 2, 9, 1], [30], [4, 4, 4, 4, 4, 4, 4, 4], [1, 1, 1], [64, 17, 40]]


def tiny_classifier(seed: int = 0, **overrides: object) -> SequenceClassifier:
    torch.manual_seed(seed)
    return build_classifier(ModelConfig.preset("tiny", vocab_size=VOCAB, **overrides), ClassifierConfig()).eval()


@pytest.fixture(scope="module")
def model() -> SequenceClassifier:
    return tiny_classifier()


@pytest.fixture(scope="module")
def onnx_path(model: SequenceClassifier, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_onnx(model, tmp_path_factory.mktemp("onnx") / "model.onnx")


@pytest.fixture(scope="module")
def session(onnx_path: Path):
    return load_session(onnx_path, threads=2)


def torch_logits(model: SequenceClassifier, *inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


@pytest.mark.parametrize("lengths", LENGTH_SETS, ids=lambda ls: f"B{len(ls)}xT{max(ls)}")
def test_onnx_matches_torch_on_padded_batches(model, session, lengths: list[int]) -> None:
    ids, mask = padded_batch(VOCAB, lengths)
    expected = torch_logits(model, ids, mask)
    got = torch.from_numpy(onnx_logits(session, ids, mask))
    assert got.shape == (len(lengths), 2)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0.0)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_onnx_padding_does_not_change_logits(session) -> None:
    ids, mask = padded_batch(VOCAB, [6, 3])
    longer_ids = torch.cat([ids, torch.zeros(2, 10, dtype=torch.long)], dim=1)  # (2, 16), more padding
    longer_mask = torch.cat([mask, torch.zeros(2, 10, dtype=torch.long)], dim=1)
    np.testing.assert_allclose(onnx_logits(session, longer_ids, longer_mask), onnx_logits(session, ids, mask), atol=1e-6)


def test_parity_reports_max_diff_and_argmax_agreement(model, session) -> None:
    batches = [padded_batch(VOCAB, lengths) for lengths in LENGTH_SETS]
    report = parity(model, session, batches)
    assert report["max_abs_diff"] <= ATOL
    assert report["argmax_agreement"] == 1.0
    assert report["examples"] == sum(len(lengths) for lengths in LENGTH_SETS)


def test_parity_detects_a_different_model(session) -> None:
    other = tiny_classifier(seed=1)  # same shapes, other weights: the session no longer matches
    report = parity(other, session, [padded_batch(VOCAB, [5, 9, 2, 7])])
    assert report["max_abs_diff"] > 1e-3
    with pytest.raises(ValueError, match="batches is empty"):
        parity(other, session, [])


def test_graph_inputs_outputs_have_names_and_symbolic_dims(onnx_path: Path) -> None:
    graph_model = onnx.load(str(onnx_path))
    int64 = onnx.TensorProto.INT64

    def dims(value_info: onnx.ValueInfoProto) -> list[str | int]:
        return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]

    inputs = {i.name: i for i in graph_model.graph.input}
    assert list(inputs) == ["input_ids", "attention_mask"]
    for value_info in inputs.values():
        assert value_info.type.tensor_type.elem_type == int64
        assert dims(value_info) == ["batch", "sequence"]
    [output] = graph_model.graph.output
    assert output.name == "logits"
    assert dims(output) == ["batch", 2]
    assert graph_model.opset_import[0].version == 18


def test_export_is_one_self_contained_file(onnx_path: Path) -> None:
    graph_model = onnx.load(str(onnx_path), load_external_data=False)
    external = [t.name for t in graph_model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external == []
    assert sorted(p.name for p in onnx_path.parent.iterdir()) == ["model.onnx"]  # no temp, no .data


def test_failed_export_keeps_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous good model")

    def broken_export(model, args, path, opset) -> None:
        Path(path).write_bytes(b"half-written garbage")  # check_model must reject this

    monkeypatch.setattr(export_mod, "_torchscript_export", broken_export)
    with pytest.raises(onnx.checker.ValidationError):
        export_onnx(tiny_classifier(), target)
    assert target.read_bytes() == b"previous good model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_export_restores_training_mode_and_exports_without_dropout(tmp_path: Path) -> None:
    model = tiny_classifier().train()
    path = export_onnx(model, tmp_path / "sub" / "model.onnx")  # parent folder created
    assert model.training
    assert "Dropout" not in {node.op_type for node in onnx.load(str(path)).graph.node}
    session = load_session(path, optimization="none")  # "all" would remove a stray Dropout itself
    ids, mask = padded_batch(VOCAB, [7, 12, 3])
    expected = torch_logits(model.eval(), ids, mask)
    torch.testing.assert_close(torch.from_numpy(onnx_logits(session, ids, mask)), expected, atol=ATOL, rtol=0.0)


def test_token_types_export_a_third_input(tmp_path: Path) -> None:
    model = tiny_classifier()
    session = load_session(export_onnx(model, tmp_path / "tt.onnx", with_token_types=True))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert session.get_inputs()[2].shape == ["batch", "sequence"]
    ids, mask = padded_batch(VOCAB, [9, 4, 13])
    segments = (torch.arange(13) >= 5).long().expand(3, 13) * mask  # sentence B from position 5
    expected = torch_logits(model, ids, mask, segments)
    got = torch.from_numpy(onnx_logits(session, ids, mask, segments))
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0.0)
    # The input is really used: segment 0 everywhere (the default) gives other logits.
    default = torch.from_numpy(onnx_logits(session, ids, mask))
    torch.testing.assert_close(default, torch_logits(model, ids, mask), atol=ATOL, rtol=0.0)
    assert (default - got).abs().max() > 1e-4


def test_onnx_logits_refuses_segments_the_graph_cannot_take(session) -> None:
    ids, mask = padded_batch(VOCAB, [4, 6])
    np.testing.assert_array_equal(
        onnx_logits(session, ids, mask, torch.zeros_like(ids)), onnx_logits(session, ids, mask)
    )
    with pytest.raises(ValueError, match="with_token_types=True"):
        onnx_logits(session, ids, mask, torch.ones_like(ids))


@pytest.mark.parametrize("optimization", sorted(OPTIMIZATION_LEVELS))
def test_every_optimization_level_gives_the_same_logits(model, onnx_path: Path, optimization: str) -> None:
    session = load_session(onnx_path, threads=1, optimization=optimization)
    assert session.get_session_options().intra_op_num_threads == 1
    ids, mask = padded_batch(VOCAB, [5, 20])
    torch.testing.assert_close(
        torch.from_numpy(onnx_logits(session, ids, mask)), torch_logits(model, ids, mask), atol=ATOL, rtol=0.0
    )


def test_load_session_rejects_bad_arguments(onnx_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"optimization: 'fast' is not one of \['all', 'basic', 'extended', 'none'\]"):
        load_session(onnx_path, optimization="fast")
    with pytest.raises(ValueError, match="threads: -1"):
        load_session(onnx_path, threads=-1)
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        load_session(tmp_path / "missing.onnx")


def test_export_modules_import_no_onnx_until_called() -> None:
    import json
    import subprocess
    import sys

    code = (
        "import sys, json, minibert.export, minibert.quantize\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime', 'onnxscript'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_parity_sample_spreads_evenly_and_keeps_small_splits_whole() -> None:
    from pipeline.stages.export import parity_sample

    windows = [[i] for i in range(10_000)]
    sample = parity_sample(windows, 4)
    assert sample == [[0], [3333], [6666], [9999]], "first, last and evenly between: every length bucket is seen"
    assert parity_sample(windows[:872], 4096) == windows[:872] and parity_sample(windows, None) == windows


def test_a_refused_graph_leaves_both_previous_graphs_in_place(tmp_path: Path) -> None:
    """The export stage writes two graphs; the second failing its parity check must not leave a new
    portable graph beside the old fused one (nor any candidate file)."""
    from pipeline.io import StageError
    from pipeline.stages.export import verified_exports

    portable, fused = tmp_path / "student.onnx", tmp_path / "student_fused.onnx"
    portable.write_text("old portable")
    fused.write_text("old fused")

    def refuse(path: Path) -> dict[str, float]:
        raise StageError(f"{path.name}: parity 0.5 above PARITY_ATOL")

    with pytest.raises(StageError, match="parity"):
        verified_exports([(portable, lambda p: p.write_text("new portable"), lambda p: {"max_abs_diff": 0.0}),
                          (fused, lambda p: p.write_text("new fused"), refuse)])
    assert portable.read_text() == "old portable" and fused.read_text() == "old fused"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["student.onnx", "student_fused.onnx"]
    metrics = verified_exports([(portable, lambda p: p.write_text("new portable"), lambda p: {"a": 1.0}),
                                (fused, lambda p: p.write_text("new fused"), lambda p: {"b": 2.0})])
    assert metrics == {"a": 1.0, "b": 2.0} and fused.read_text() == "new fused" and portable.read_text() == "new portable"


def test_the_stage_writes_both_graphs_stamped_and_fuses_a_transformers_attention(tmp_path: Path) -> None:
    from conftest import toy_classifier, toy_texts, toy_tokenizer

    from minibert.contract import Contract, Windows, read_onnx_contract
    from pipeline.params import ExportParams
    from pipeline.stages.export import run

    tok, _ = toy_tokenizer(tmp_path)
    student = toy_classifier(tok)
    contract = Contract("classifier", None, Windows(16, 6, "mean"), ("no", "yes"))
    texts = toy_texts(np.random.default_rng(1), [4, 15, 40] * 5)
    out, fused = tmp_path / "student.onnx", tmp_path / "student_fused.onnx"
    shape = ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64)  # toy_classifier's
    metrics = run(ExportParams(threads=1), student, contract, shape, tok, texts, out, fused)
    assert read_onnx_contract(out) == contract and read_onnx_contract(fused) == contract
    assert metrics["fused_Attention_nodes"] == shape.num_layers and metrics["max_abs_diff_b8"] <= 1e-4
    assert metrics["windows"] > len(texts), "the 40-word texts are read through several windows"
    assert metrics["size_mb"] == out.stat().st_size / 1e6
    unfused = run(ExportParams(threads=1), student, contract, None, tok, texts, out, fused)  # as for a word-CNN
    assert unfused["fused_Attention_nodes"] == 0 and fused.read_bytes() == out.read_bytes()
