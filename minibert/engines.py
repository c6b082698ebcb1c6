"""Inference engines: one exported ONNX classifier behind ``engine(ids, mask) -> logits``, on ONNX Runtime or
OpenVINO, in fp32 or bf16; torch-free, so the serving environment can import it.

References: ONNX Runtime's Python API (``InferenceSession``, ``SessionOptions``) and OpenVINO's
(``Core.read_model`` reads the ONNX file itself, ``compile_model`` with ``INFERENCE_NUM_THREADS``,
``PERFORMANCE_HINT`` and ``INFERENCE_PRECISION_HINT``). A *path* is a runtime and the precision it computes
in, written ``runtime/precision``:

    onnxruntime/fp32   ORT's CPU (or CUDA / TensorRT) provider; any graph, fused contrib operators included
    openvino/fp32      OpenVINO's CPU plugin; standard operators only (the portable or int8 QDQ graph)
    openvino/bf16      the same with bf16 inference precision: fp32 in, bf16 products with fp32 sums inside;
                       needs a CPU with native bf16 (AVX512-BF16 or AMX), which OpenVINO reports as ``BF16``

An int8 graph (quantize-dequantize pairs, ``minibert.quantize``) runs its int8 operators in int8 on any path;
the precision names what the rest of the graph computes in. ``available_paths`` lists what this host can run:
OpenVINO's where it is installed (bf16 where the CPU has it), and ONNX Runtime fp32, the portable path, always.
Which is fastest depends on the CPU and the graph (benchmarks/serving_runtimes.py: bf16 pays on an AMD Zen 4,
not on a Xeon without AMX; OpenVINO runs the int8 word-CNN 3.7x faster than ONNX Runtime, the fp32 teacher no
faster), so ``minibert.runtime`` times them at load. Which paths a graph was verified on, and the windows to
verify another on, are in its metadata (``minibert.contract.Parity``); ``minibert.runtime`` checks a path the
file does not list before it answers with it.

Shape legend: B batch, T sequence length, L labels.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

OUTPUT_NAME = "logits"
RUNTIMES = ("auto", "onnxruntime", "openvino")
PRECISIONS = ("auto", "fp32", "bf16")
# Our name -> onnxruntime.GraphOptimizationLevel member (looked up lazily: ORT is optional).
OPTIMIZATION_LEVELS: dict[str, str] = {
    "none": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
# device -> ONNX Runtime execution providers, in preference order (CPU always last, as fallback).
DEVICES: dict[str, tuple[str, ...]] = {
    "cpu": ("CPUExecutionProvider",),
    "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
    "auto": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
}
PORTABLE_PATH = "onnxruntime/fp32"  # the path every host can take


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an ImportError that says what to install."""
    try:
        import onnxruntime
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("ONNX Runtime inference needs onnxruntime: pip install 'onnxruntime>=1.32'") from err
    return onnxruntime


def openvino_module() -> Any | None:
    """The ``openvino`` module, or None where it is not installed (the portable path then serves)."""
    try:
        import openvino
    except ImportError:
        return None
    return openvino


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether OpenVINO's CPU plugin computes natively in bf16 here (AVX512-BF16 or AMX); False without OpenVINO.
    Asked once a process: every load, gate and path choice reads it."""
    ov = openvino_module()
    return ov is not None and "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def available_paths() -> list[str]:
    """The paths this host can run: OpenVINO's where it is installed, then the portable path."""
    paths = []
    if openvino_module() is not None:
        paths += (["openvino/bf16"] if cpu_has_bf16() else []) + ["openvino/fp32"]
    return [*paths, PORTABLE_PATH]


def matching_paths(runtime: str = "auto", precision: str = "auto") -> list[str]:
    """The ``available_paths`` these settings allow on this host, never empty (``minibert.runtime`` times them);
    a named runtime or precision this host cannot run is a ValueError that says what it lacks."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime: {runtime!r} is not one of {list(RUNTIMES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {list(PRECISIONS)}")
    wanted = [p for p in available_paths()
              if runtime in ("auto", p.split("/")[0]) and precision in ("auto", p.split("/")[1])]
    if wanted:
        return wanted
    if runtime == "openvino" and openvino_module() is None:
        raise ValueError("runtime 'openvino' needs the openvino package (pip install openvino); or use runtime 'auto'")
    if precision == "bf16" and runtime == "onnxruntime":
        raise ValueError("precision 'bf16' runs on OpenVINO only; use runtime 'openvino' or 'auto'")
    raise ValueError(f"precision {precision!r} is not native on this CPU (OpenVINO reports no BF16); use 'fp32' or 'auto'")


def choose_path(runtime: str = "auto", precision: str = "auto") -> str:
    """The first path these settings allow here (``matching_paths``)."""
    return matching_paths(runtime, precision)[0]


def execution_providers(device: str, available: Iterable[str]) -> list[str]:
    """The providers to ask ONNX Runtime for on ``device`` (a key of ``DEVICES``), given those it has.

    ``auto`` takes whatever is present, TensorRT before CUDA before CPU; a named accelerator that
    this onnxruntime build lacks is an error (install onnxruntime-gpu), never a silent CPU run.
    """
    if device not in DEVICES:
        raise ValueError(f"device: {device!r} is not one of {sorted(DEVICES)}")
    available = set(available)
    wanted = [p for p in DEVICES[device] if p in available or p == "CPUExecutionProvider"]
    if device not in ("cpu", "auto") and DEVICES[device][0] not in available:
        raise ValueError(
            f"device {device!r} needs {DEVICES[device][0]}, which this onnxruntime lacks "
            f"(it has {sorted(available)}); install onnxruntime-gpu or use device 'cpu' or 'auto'"
        )
    return wanted


def _check_file(path: str | os.PathLike[str]) -> None:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no ONNX model at {path}; create one with minibert.export.export_onnx")


def load_session(path: str | os.PathLike[str], threads: int = 0, optimization: str = "all", device: str = "cpu") -> Any:
    """An ONNX Runtime session for ``path``.

    threads: intra-op threads; 0 lets ONNX Runtime choose (one per physical core).
    optimization: a key of ``OPTIMIZATION_LEVELS`` (none, basic, extended, all).
    device: a key of ``DEVICES`` (cpu, cuda, tensorrt, auto); see ``execution_providers``.
    """
    if optimization not in OPTIMIZATION_LEVELS:
        raise ValueError(f"optimization: {optimization!r} is not one of {sorted(OPTIMIZATION_LEVELS)}")
    if threads < 0:
        raise ValueError(f"threads: {threads} must be >= 0 (0 lets ONNX Runtime choose)")
    _check_file(path)
    ort = import_onnxruntime()
    providers = execution_providers(device, ort.get_available_providers())
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[optimization])
    session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
    if session.get_providers()[0] != providers[0]:  # ORT falls back to CPU on a provider error
        raise RuntimeError(f"ONNX Runtime could not start {providers[0]} for {path} (it runs on "
                           f"{session.get_providers()[0]}); check the CUDA / TensorRT install or use device 'cpu'")
    return session


def feed(declared: Iterable[str], input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> dict[str, np.ndarray]:
    """The (B, T) int64 inputs a graph declares. A graph with ``token_type_ids`` gets zeros when none are given
    (segment 0, as the torch model does with None); a graph without it accepts all-zero token types and refuses
    any others, since dropping them would change the answer."""
    declared = set(declared)
    out = {"input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
           "attention_mask": np.ascontiguousarray(attention_mask, dtype=np.int64)}
    if token_type_ids is not None:
        types = np.ascontiguousarray(token_type_ids, dtype=np.int64)
        if "token_type_ids" not in declared and types.any():
            raise ValueError("token_type_ids has non-zero segments but the ONNX model has no token_type_ids input; "
                             "export it with export_onnx(..., with_token_types=True)")
        out["token_type_ids"] = types
    elif "token_type_ids" in declared:
        out["token_type_ids"] = np.zeros_like(out["input_ids"])
    return {k: v for k, v in out.items() if k in declared}


def onnx_logits(session: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> np.ndarray:
    """Logits (B, L) float32 from an ONNX Runtime ``session`` for (B, T) inputs (numpy, or CPU tensors)."""
    return session.run([OUTPUT_NAME], feed((i.name for i in session.get_inputs()), input_ids, attention_mask,
                                            token_type_ids))[0]


@dataclass
class Engine:
    """A loaded graph on one path: ``engine(ids, mask)`` -> (B, L) float32 logits; thread-safe."""

    path: str  # runtime/precision
    inputs: frozenset[str]  # the graph's declared input names
    num_labels: int
    metadata: dict[str, str]  # the graph's metadata_props (its contract: minibert.contract)
    run: Callable[[dict[str, np.ndarray]], np.ndarray]
    handle: Any = None  # the runtime's own object: an onnxruntime.InferenceSession or an openvino.CompiledModel
    # OpenVINO: (max_length, pad_id) -> a ``run`` that takes small calls on static shapes (``with_static_shapes``)
    static: Callable[[int, int], Callable[[dict[str, np.ndarray]], np.ndarray]] | None = None

    def __call__(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> np.ndarray:
        return self.run(feed(self.inputs, input_ids, attention_mask, token_type_ids))

    def with_static_shapes(self, max_length: int, pad_id: int) -> Engine:
        """This engine, where its runtime gains by it (OpenVINO), running calls of up to ``STATIC_BATCHES[-1]``
        windows of up to ``max_length`` tokens on graphs compiled at static shapes: the rows padded up to the next
        of ``STATIC_BATCHES`` (copies of the first row) and the tokens up to the next of ``static_lengths(max_length)``
        (``pad_id``, masked out), each shape compiled at its first call and kept. OpenVINO's dynamic-shape call costs
        about 0.4 ms more than the static one, half of a one-text answer (benchmarks/JOURNAL.md); from 32 windows a
        call the two run alike, and larger calls stay dynamic. The answers are the dynamic graph's: ``pad_id`` is what
        the caller pads with, and the window length the model was trained on (its contract) bounds the padding, so a
        graph with learned positions never sees one it lacks."""
        return self if self.static is None else replace(self, run=self.static(max_length, pad_id), static=None)


STATIC_BATCHES = (1, 2, 4, 8)  # the row counts OpenVINO's static-shape graphs take (Engine.with_static_shapes)
SHORTEST_STATIC = 16  # the shortest static window length


def static_lengths(max_length: int) -> tuple[int, ...]:
    """The window lengths a call is padded up to on static shapes: powers of two from ``SHORTEST_STATIC`` below
    ``max_length``, then ``max_length`` (128 -> 16, 32, 64, 128; 100 -> 16, 32, 64, 100)."""
    lengths, length = [], SHORTEST_STATIC
    while length < max_length:
        lengths.append(length)
        length *= 2
    return (*lengths, max_length)


def _onnxruntime_engine(path: Path, threads: int, optimization: str, device: str) -> Engine:
    session = load_session(path, threads=threads, optimization=optimization, device=device)
    return Engine(PORTABLE_PATH, frozenset(i.name for i in session.get_inputs()), int(session.get_outputs()[0].shape[-1]),
                  dict(session.get_modelmeta().custom_metadata_map), lambda f: session.run([OUTPUT_NAME], f)[0],
                  session)


def _openvino_engine(path: Path, threads: int, precision: str) -> Engine:
    ov = openvino_module()
    core = ov.Core()
    model = core.read_model(str(path))
    framework = model.get_rt_info()["framework"] if model.has_rt_info(["framework"]) else None
    metadata = {} if framework is None else {key: model.get_rt_info(["framework", key]).astype(str)
                                             for key in json.loads(json.dumps(list(framework.keys())))}
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[precision]}
    compiled = core.compile_model(model, "CPU", config)
    names = [i.get_any_name() for i in compiled.inputs]
    local = threading.local()  # an infer request is not thread-safe: one a thread and compiled graph

    def infer(graph: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
        requests = local.__dict__.setdefault("requests", {})
        request = requests.get(id(graph))
        if request is None:
            request = requests[id(graph)] = graph.create_infer_request()
        # the inputs set by position as tensors over the arrays' own memory: infer(dict) looks each name up and
        # copies, a quarter of a one-text call (benchmarks/JOURNAL.md)
        for index, name in enumerate(names):
            request.set_input_tensor(index, ov.Tensor(inputs[name], shared_memory=True))
        request.infer()
        return np.array(request.get_output_tensor(0).data, dtype=np.float32, copy=True)  # the request reuses its buffer

    def static(max_length: int, pad_id: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        lengths, shapes, lock = static_lengths(max_length), {}, threading.Lock()

        def at(rows: int, length: int) -> Any:
            with lock:
                if (rows, length) not in shapes:
                    reshaped = model.clone()
                    reshaped.reshape({name: [rows, length] for name in names})
                    shapes[rows, length] = core.compile_model(reshaped, "CPU", config)
                return shapes[rows, length]

        def run_static(inputs: dict[str, np.ndarray]) -> np.ndarray:
            batch, width = inputs["input_ids"].shape
            rows = next((b for b in STATIC_BATCHES if b >= batch), None)
            length = next((t for t in lengths if t >= width), None)
            if rows is None or length is None or batch == 0:
                return infer(compiled, inputs)
            padded = {}
            for name, array in inputs.items():
                full = np.full((rows, length), pad_id if name == "input_ids" else 0, dtype=np.int64)
                full[:batch, :width] = array
                full[batch:] = full[0]  # no all-masked row
                padded[name] = full
            return infer(at(rows, length), padded)[:batch]

        return run_static

    labels = model.output(0).get_partial_shape()[-1]
    return Engine(f"openvino/{precision}", frozenset(i.get_any_name() for i in model.inputs),
                  labels.get_length() if labels.is_static else -1, metadata, lambda f: infer(compiled, f), compiled,
                  static)


def load_engine(path: str | os.PathLike[str], engine_path: str = PORTABLE_PATH, threads: int = 0,
                optimization: str = "all", device: str = "cpu") -> Engine:
    """The graph at ``path`` on ``engine_path`` (``runtime/precision``, as ``choose_path`` gives it).
    ``optimization`` and ``device`` apply to ONNX Runtime; OpenVINO runs on the CPU."""
    _check_file(path)
    runtime, _, precision = engine_path.partition("/")
    if runtime == "onnxruntime" and precision == "fp32":
        return _onnxruntime_engine(Path(path), threads, optimization, device)
    if runtime == "openvino" and precision in ("fp32", "bf16"):
        if openvino_module() is None:
            raise ValueError(f"path {engine_path!r} needs the openvino package (pip install openvino)")
        return _openvino_engine(Path(path), threads, precision)
    raise ValueError(f"engine path {engine_path!r} is not one of onnxruntime/fp32, openvino/fp32, openvino/bf16")
