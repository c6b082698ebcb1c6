"""Post-training int8 quantisation: dynamic in torch and in ONNX Runtime, calibrated static (QDQ) in ONNX Runtime, and
weight-only int8 embedding rows in any ONNX graph.

References: PyTorch's "Dynamic quantization on BERT" tutorial
(``torch.ao.quantization.quantize_dynamic`` on the ``nn.Linear`` layers) and ONNX Runtime's
"Quantize ONNX models" guide (``onnxruntime.quantization.quantize_dynamic``). Both store the
linear weights as int8 with a per-tensor scale (by default), and quantise activations on the fly per batch.
Departures:

1. In torch only ``nn.Linear`` is quantised; embeddings, LayerNorm and the attention maths stay
   fp32, so the checkpoint shrinks to about 0.41x (tiny preset, vocabulary 300). ONNX Runtime's
   defaults also quantise the word-embedding lookup (Gather), hence about 0.37x there.
2. ``torch.ao.quantization`` is deprecated in torch 2.13 but still works; its notices are
   silenced by message inside these functions only. A quantised model is saved as its state
   dict and rebuilt by quantising a fresh fp32 skeleton (``load_int8``), since packed int8
   weights cannot be loaded into an fp32 module.
3. The ONNX Runtime path skips ``quant_pre_process`` (shape inference + optimisation before
   quantising): graph fusion is ``minibert.ort_fusion``'s job, done before this step. ONNX's
   shape inference cannot type the outputs of ORT's contrib operators (``Attention``,
   ``SkipLayerNormalization``), so float32 is declared as the default tensor type.
4. Files are written atomically (``minibert.export.atomic_output``); onnxruntime is imported
   lazily.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from minibert.engines import import_onnxruntime
from minibert.files import atomic_output
from minibert.onnx_deps import import_onnx

# torch 2.13's notices on torch.ao.quantization and quantized tensors, matched by message start.
_QUANTIZATION_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"torch\.ao\.quantization is deprecated", DeprecationWarning),
    (r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor", UserWarning),
    (r"TypedStorage is deprecated", UserWarning),  # raised while (de)serialising quantized tensors
)


@contextmanager
def _quiet_quantization() -> Iterator[None]:
    """Silence exactly the deprecation notices listed above, nothing else."""
    with warnings.catch_warnings():
        for message, category in _QUANTIZATION_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


class _DropMessage(logging.Filter):
    """A logging filter that drops records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextmanager
def _without_preprocess_advice() -> Iterator[None]:
    """Drop ONNX Runtime's root-logger advice to run quant_pre_process (departure 3), only that."""
    root, advice = logging.getLogger(), _DropMessage("Please consider to run pre-processing before quantization")
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in eval mode with every ``nn.Linear`` replaced by a dynamic int8 one.

    Weights become int8 (one scale per tensor, zero point 0); activations are quantised per batch at run
    time. Inputs and outputs keep the fp32 model's shapes and dtypes. ``model`` is not modified.
    """
    with _quiet_quantization():
        from torch.ao.quantization import quantize_dynamic

        # One explicit copy, quantised in place (inplace=False would deep-copy it a second time).
        return quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8, inplace=True)


def save_int8(model: nn.Module, path: str | os.PathLike[str]) -> Path:
    """Write a quantised model's state dict (int8 packed weights included) to ``path`` atomically."""
    with atomic_output(path) as tmp, _quiet_quantization():
        torch.save(model.state_dict(), tmp)
    return Path(path)


def load_int8(fp32_model_skeleton: nn.Module, path: str | os.PathLike[str]) -> nn.Module:
    """Rebuild a model saved by ``save_int8``: quantise the skeleton, then load the state dict.

    The skeleton is an fp32 model of the same config (for example ``build_classifier(cfg, head)``);
    its weights do not matter and it is left unmodified.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"no int8 checkpoint at {path}; write one with minibert.quantize.save_int8")
    model = quantize_dynamic_int8(fp32_model_skeleton)
    with _quiet_quantization():
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    return model


def quantize_onnx_int8(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], reduce_range: bool = False, per_channel: bool = False,
    conv: bool = False,
) -> Path:
    """ONNX Runtime dynamic quantisation of ``src`` (MatMul/Gemm weights to QInt8) into ``dst``.

    reduce_range: 7-bit weights, for CPUs without VNNI whose int8 dot products can saturate.
    per_channel: one scale per output channel instead of per tensor (more accurate, larger).
    conv: Conv weights too (``ConvInteger``). Off by default: for the word-CNN student ORT's
    ConvInteger took 0.88 ms p50 a sentence where the fp32 convolutions take 0.31 (benchmarks/JOURNAL.md).
    Inputs and outputs keep the fp32 graph's names, shapes and dtypes.
    """
    if not Path(src).is_file():
        raise FileNotFoundError(f"no ONNX model at {src}; create one with minibert.export.export_onnx")
    import_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    float32 = import_onnx().TensorProto.FLOAT
    with atomic_output(dst) as tmp, _without_preprocess_advice():
        quantize_dynamic(
            str(src), str(tmp), per_channel=per_channel, reduce_range=reduce_range, weight_type=QuantType.QInt8,
            op_types_to_quantize=[op for op in IntegerOpsRegistry if conv or op != "Conv"],
            extra_options={"DefaultTensorType": float32},
        )
    return Path(dst)


STATIC_OP_TYPES = ("Conv", "MatMul")  # what the static int8 graph quantises by default


def quantize_onnx_static_int8(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], calibration: Sequence[Sequence[int]], pad_id: int,
    batch_size: int = 32, per_channel: bool = True, op_types: Sequence[str] | None = None,
) -> Path:
    """Calibrated static int8 of the portable graph ``src`` into ``dst``: ONNX Runtime's ``quantize_static`` in the
    QDQ format (QuantizeLinear / DequantizeLinear pairs around each quantised operator), activation ranges taken
    (min-max) from ``calibration``, token-id windows of training texts run in length-sorted batches of
    ``batch_size``. Both runtimes read the QDQ format as int8 kernels: ONNX Runtime fuses the pairs into
    QLinearConv / QLinearMatMul, OpenVINO into its int8 convolutions and matmuls. ``per_channel``: one weight scale
    an output channel. ``op_types``: the operator types to quantise; the default (``STATIC_OP_TYPES``) takes the
    convolutions and matmuls, where the compute is, and leaves the rest in fp32: the classifier head (a Gemm)
    and the embedding lookups (Gather) cost the word-CNN student 0.8 points of SST-2 dev in int8 (argmax agreement
    with torch 97.8 % on OpenVINO, 100 % without them: benchmarks/JOURNAL.md), and OpenVINO 2026.4 fails to
    compile a quantised bias Add. Inputs and outputs keep the fp32 graph's names, shapes and dtypes."""
    if not Path(src).is_file():
        raise FileNotFoundError(f"no ONNX model at {src}; create one with minibert.export.export_onnx")
    if not calibration:
        raise ValueError("calibration has no windows; give token-id windows of training texts")
    import_onnxruntime()
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from minibert.batching import pad_ids, sorted_batches

    declared = {i.name for i in import_onnx().load(str(src), load_external_data=False).graph.input}

    class Windows(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(sorted_batches([len(w) for w in calibration], batch_size))

        def get_next(self) -> dict | None:
            index = next(self.batches, None)
            if index is None:
                return None
            ids, mask = pad_ids([calibration[i] for i in index], pad_id)
            return {k: v for k, v in {"input_ids": ids, "attention_mask": mask,
                                      "token_type_ids": np.zeros_like(ids)}.items() if k in declared}

    with atomic_output(dst) as tmp, _without_preprocess_advice():
        quantize_static(str(src), str(tmp), Windows(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        op_types_to_quantize=list(op_types or STATIC_OP_TYPES))
    return Path(dst)


EMBEDDING_MIN_ROWS = 512  # a Gather table this many rows or more is a vocabulary worth storing in int8


def quantize_onnx_embeddings_int8(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                                  min_rows: int = EMBEDDING_MIN_ROWS) -> list[str]:
    """Weight-only int8 of the embedding tables in ``src`` (any graph: fp32 or QDQ int8) into ``dst``: each float
    initializer of ``min_rows`` rows or more that only ``Gather`` nodes read along axis 0 is stored as int8 with one
    scale a row (symmetric, ``max |row| / 127``), and each lookup becomes ``Gather`` of the int8 rows, ``Cast`` to
    float and ``Mul`` by the gathered row scales: the same rows to within half a step of their own scale, in a
    quarter of the bytes, with standard operators every runtime runs as they are. This is not ONNX Runtime's
    ``Gather`` quantisation (one scale for the whole table, and the looked-up activations quantised too), which
    cost the word-CNN student 0.3 points of SST-2 (benchmarks/JOURNAL.md). The lookups' outputs keep their names,
    shapes and dtype; the rest of the graph is untouched. Returns the names of the tables stored in int8 (none: ``dst``
    is ``src``'s graph as it was)."""
    if not Path(src).is_file():
        raise FileNotFoundError(f"no ONNX model at {src}; create one with minibert.export.export_onnx")
    onnx = import_onnx()
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    tables = {}
    for init in graph.initializer:
        users = readers.get(init.name, [])
        if (init.data_type == TensorProto.FLOAT and len(init.dims) == 2 and init.dims[0] >= min_rows and users
                and init.name not in outputs
                and all(n.op_type == "Gather" and n.input[0] == init.name
                        and all(a.name != "axis" or a.i == 0 for a in n.attribute) for n in users)):
            tables[init.name] = init
    nodes = []
    for node in graph.node:
        if node.op_type != "Gather" or node.input[0] not in tables:
            nodes.append(node)
            continue
        table, ids, out = node.input[0], node.input[1], node.output[0]
        prefix = f"{node.name or out}.int8"
        nodes += [helper.make_node("Gather", [f"{table}.int8", ids], [f"{prefix}.rows"], name=f"{prefix}.gather", axis=0),
                  helper.make_node("Gather", [f"{table}.scale", ids], [f"{prefix}.scales"], name=f"{prefix}.gather_scale",
                                   axis=0),
                  helper.make_node("Cast", [f"{prefix}.rows"], [f"{prefix}.float"], name=f"{prefix}.cast",
                                   to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"{prefix}.float", f"{prefix}.scales"], [out], name=f"{prefix}.scale")]
    kept = [init for init in graph.initializer if init.name not in tables]
    for name, init in tables.items():
        weights = numpy_helper.to_array(init).astype(np.float32)
        scale = np.abs(weights).max(axis=1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0  # an all-zero row (a padding embedding) stays zero
        kept += [numpy_helper.from_array(np.clip(np.rint(weights / scale), -127, 127).astype(np.int8), f"{name}.int8"),
                 numpy_helper.from_array(scale.astype(np.float32), f"{name}.scale")]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    with atomic_output(dst) as tmp:
        onnx.save(model, str(tmp))
    return list(tables)


def model_size_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``, written to memory: the checkpoint's size."""
    buffer = io.BytesIO()
    with _quiet_quantization():
        torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes
