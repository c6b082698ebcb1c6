"""Dynamic int8 quantisation in torch and ONNX Runtime: accuracy vs fp32, structure, size,
persistence, and that the fp32 original is untouched.

Tolerance for int8 vs fp32 logits: relative to the largest |fp32 logit| because a randomly
initialised tiny model has logits of about 0.1. Measured (seeds 0-5, the batch below):
torch int8 max |Δ| 0.0015-0.0028, i.e. 1.5-3.4 % of max |logit|; ORT int8 0.0015-0.0019,
1.3-3.4 %. The bound, 10 %, leaves about 3x headroom; a broken quantisation (wrong scale,
dropped layer) moves logits by their own size, i.e. ~100 %.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
from conftest import padded_batch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from minibert import ClassifierConfig, ModelConfig, SequenceClassifier, build_classifier
from minibert.engines import load_session, onnx_logits
from minibert.export import export_onnx
from minibert.quantize import (
    load_int8,
    model_size_bytes,
    quantize_dynamic_int8,
    quantize_onnx_int8,
    save_int8,
)

VOCAB = 300
RELATIVE_TOL = 0.10  # of max |fp32 logit|; see the module docstring for the measurement
LENGTHS = [3, 11, 2, 9, 1, 30, 17, 8]


def tiny_classifier(seed: int = 0) -> SequenceClassifier:
    torch.manual_seed(seed)
    return build_classifier(ModelConfig.preset("tiny", vocab_size=VOCAB), ClassifierConfig()).eval()


def logits(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, mask)


def assert_int8_close(got: torch.Tensor, reference: torch.Tensor) -> None:
    bound = RELATIVE_TOL * reference.abs().max().item()
    torch.testing.assert_close(got, reference, atol=bound, rtol=0.0)


@pytest.fixture(scope="module")
def model() -> SequenceClassifier:
    return tiny_classifier()


@pytest.fixture(scope="module")
def int8_model(model: SequenceClassifier) -> nn.Module:
    return quantize_dynamic_int8(model)


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return padded_batch(VOCAB, LENGTHS)


# --- torch dynamic int8 -------------------------------------------------------------------------


def test_torch_int8_logits_close_to_fp32(model, int8_model, batch) -> None:
    fp32, int8 = logits(model, *batch), logits(int8_model, *batch)
    assert int8.shape == fp32.shape == (len(LENGTHS), 2)
    assert_int8_close(int8, fp32)
    assert not torch.equal(int8, fp32)  # the weights really are int8 now


def test_every_linear_is_replaced_by_a_dynamic_int8_one(model, int8_model) -> None:
    fp32_linears = {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    int8_linears = {name for name, m in int8_model.named_modules() if isinstance(m, DynamicQuantizedLinear)}
    assert len(fp32_linears) == 2 * 4 + 2  # per layer qkv, out, up, down; pooler, classifier
    assert int8_linears == fp32_linears
    assert not any(isinstance(m, nn.Linear) for m in int8_model.modules())
    assert int8_model.get_submodule("head.classifier").weight().dtype == torch.qint8


def test_quantizing_leaves_the_original_untouched() -> None:
    original = tiny_classifier().train()
    before = {k: v.clone() for k, v in original.state_dict().items()}
    quantized = quantize_dynamic_int8(original)
    assert quantized is not original and not quantized.training
    assert original.training
    assert isinstance(original.get_submodule("head.classifier"), nn.Linear)
    after = original.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_int8_checkpoint_is_smaller(model, int8_model) -> None:
    ratio = model_size_bytes(int8_model) / model_size_bytes(model)
    # Measured 0.414 (2,083,328 -> 861,700 bytes): Linear weights shrink 4x, embeddings stay fp32.
    assert 0.3 < ratio < 0.45, f"int8/fp32 size ratio {ratio:.3f}"


def test_save_load_round_trip_gives_identical_logits(int8_model, batch, tmp_path: Path) -> None:
    path = save_int8(int8_model, tmp_path / "int8.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8.pt"]  # atomic: no temp left
    # Same bytes as model_size_bytes up to the zip's record names (they embed the file name).
    assert abs(path.stat().st_size - model_size_bytes(int8_model)) < 4096
    skeleton = tiny_classifier(seed=7)  # other weights: everything must come from the file
    restored = load_int8(skeleton, path)
    assert torch.equal(logits(restored, *batch), logits(int8_model, *batch))
    assert isinstance(skeleton.get_submodule("head.classifier"), nn.Linear)
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        load_int8(skeleton, tmp_path / "nothing.pt")


# --- ONNX Runtime dynamic int8 ------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_pair(model, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ort_int8")
    fp32 = export_onnx(model, folder / "fp32.onnx")
    return fp32, quantize_onnx_int8(fp32, folder / "int8.onnx")


def test_onnx_int8_file_is_smaller_and_quantized(onnx_pair) -> None:
    fp32, int8 = onnx_pair
    ratio = int8.stat().st_size / fp32.stat().st_size
    # Measured 0.371 (per-tensor), 0.377 (per-channel).
    assert ratio < 0.45, f"int8/fp32 ONNX size ratio {ratio:.3f}"
    graph = onnx.load(str(int8)).graph
    initializers = {t.name: t.data_type for t in graph.initializer}
    weights = [node.input[1] for node in graph.node if node.op_type == "MatMulInteger"]
    assert len(weights) == 2 * 4 + 2  # every Linear (MatMul or Gemm in the fp32 graph)
    assert {initializers[w] for w in weights} == {onnx.TensorProto.INT8}  # QInt8, not QUInt8
    assert sorted(p.name for p in fp32.parent.iterdir()) == ["fp32.onnx", "int8.onnx"]  # no temp left


@pytest.mark.parametrize("lengths", [LENGTHS, [40], [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]], ids=["B8", "B1xT40", "B12xT2"])
def test_onnx_int8_runs_at_dynamic_shapes_close_to_fp32(onnx_pair, lengths: list[int]) -> None:
    fp32, int8 = (load_session(p, threads=2) for p in onnx_pair)
    ids, mask = padded_batch(VOCAB, lengths)
    reference = torch.from_numpy(onnx_logits(fp32, ids, mask))
    got = torch.from_numpy(onnx_logits(int8, ids, mask))
    assert got.shape == (len(lengths), 2)
    assert_int8_close(got, reference)


@pytest.mark.parametrize("reduce_range, per_channel", [(True, False), (False, True)])
def test_onnx_int8_options_stay_close(onnx_pair, batch, tmp_path: Path, reduce_range: bool, per_channel: bool) -> None:
    fp32, _ = onnx_pair
    variant = quantize_onnx_int8(fp32, tmp_path / "v.onnx", reduce_range=reduce_range, per_channel=per_channel)
    reference = torch.from_numpy(onnx_logits(load_session(fp32), *batch))
    assert_int8_close(torch.from_numpy(onnx_logits(load_session(variant), *batch)), reference)
    with pytest.raises(FileNotFoundError, match="absent.onnx"):
        quantize_onnx_int8(tmp_path / "absent.onnx", tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()



def test_onnx_int8_leaves_convolutions_in_fp32_unless_asked(tmp_path: Path) -> None:
    from minibert.textcnn import TextCNNConfig, build_textcnn

    torch.manual_seed(0)
    cnn = build_textcnn(TextCNNConfig(vocab_size=VOCAB, dim=16, widths=(1, 3), filters=8)).eval()
    fp32 = export_onnx(cnn, tmp_path / "cnn.onnx")
    ops = {}
    for conv in (False, True):
        int8 = quantize_onnx_int8(fp32, tmp_path / f"cnn_int8_{conv}.onnx", conv=conv)
        ops[conv] = {node.op_type for node in onnx.load(str(int8)).graph.node}
        ids, mask = padded_batch(VOCAB, LENGTHS)
        assert_int8_close(torch.from_numpy(onnx_logits(load_session(int8), ids, mask)), cnn(ids, mask).detach())
    assert "Conv" in ops[False] and "ConvInteger" not in ops[False]
    assert "ConvInteger" in ops[True] and "Conv" not in ops[True]
    assert "MatMulInteger" in ops[False] and "DequantizeLinear" in ops[False], "the classifier and the embedding: int8"
