"""The inference runtime: raw text -> tokenizer -> an inference engine -> labels and probabilities.

Reference: ONNX Runtime's and OpenVINO's Python APIs (``minibert.engines``) and the sliding-window reading of
long texts in ``minibert.windows``. The runtime holds one tokenizer and one engine and does the
rest in numpy: texts are tokenized in one batched call, cut into windows, the windows run in
length-sorted batches (each padded only to its own longest window), and each text's window logits
are combined into one row. Torch-free: the registered MLflow model serves through this module.

The engine's path (``runtime/precision``: onnxruntime/fp32, openvino/fp32, openvino/bf16) is chosen per host,
by measurement: ``RuntimeConfig.runtime`` and ``precision`` default to ``auto``, and of the paths this host has
that the graph's parity record (``minibert.contract.Parity``) lists or that pass its check here, the one that
runs the record's probe windows fastest is taken (``probe_timing``, ``fastest``: in batches of ``batch_size``
and one window a call, the product of the two times); a graph without a record runs on the portable path,
onnxruntime/fp32. A path the record does not list is checked at load against
the torch logits the record carries: under auto a path that fails is left out with a warning, a path named
explicitly that fails is an ArtifactError with the numbers. ``device`` picks ONNX Runtime's execution provider
(``minibert.engines.DEVICES``): ``cpu`` by default; ``cuda`` / ``tensorrt`` run on ONNX Runtime.
``threads`` and ``optimization`` set the engine's threads and ONNX Runtime's graph level.

Shape legend: N texts, W windows, T window length, L labels.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
from tokenizers import Tokenizer

from minibert.batching import batched_logits
from minibert.contract import Parity, onnx_contract, onnx_parity
from minibert.engines import (
    DEVICES,
    OPTIMIZATION_LEVELS,
    PORTABLE_PATH,
    PRECISIONS,
    RUNTIMES,
    Engine,
    load_engine,
    matching_paths,
)
from minibert.files import ArtifactError
from minibert.tokenizer import CLS, PAD, SEP, encodable, load_tokenizer
from minibert.validation import ConfigError, check_choice, check_types
from minibert.windows import AGGREGATIONS, aggregate_windows, document_windows

log = logging.getLogger(__name__)
K = TypeVar("K")


@dataclass(frozen=True)
class RuntimeConfig:
    """How texts are read and how the session runs. The windows default to the model's own: what its
    file records (``minibert.contract``); set them only to read another way."""

    max_length: int | None = None  # tokens a window, [CLS] and [SEP] included
    stride: int | None = None  # window step for longer texts
    aggregate: str | None = None  # mean | max | first: window logits -> one row
    batch_size: int = 32  # windows a session call
    threads: int = 0  # intra-op threads; 0 lets the runtime choose
    optimization: str = "all"  # ONNX Runtime's graph level: key of minibert.engines.OPTIMIZATION_LEVELS
    device: str = "cpu"  # ONNX Runtime's execution provider: key of minibert.engines.DEVICES
    runtime: str = "auto"  # auto | onnxruntime | openvino (minibert.engines)
    precision: str = "auto"  # auto | fp32 | bf16 (bf16 on OpenVINO, where the CPU has it natively)

    def __post_init__(self) -> None:
        check_types(self)
        if self.max_length is not None and self.max_length < 3:
            raise ConfigError(f"max_length: {self.max_length} must be >= 3 to hold [CLS] x [SEP]")
        if self.max_length is not None and self.stride is not None and not 0 < self.stride <= self.max_length - 2:
            raise ConfigError(f"stride: {self.stride} must be in 1..{self.max_length - 2} (max_length - 2)")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size: {self.batch_size} must be >= 1")
        if self.threads < 0:
            raise ConfigError(f"threads: {self.threads} must be >= 0 (0 lets ONNX Runtime choose)")
        if self.aggregate is not None:
            check_choice(self.aggregate, AGGREGATIONS, "aggregate")
        check_choice(self.optimization, OPTIMIZATION_LEVELS, "optimization")
        check_choice(self.device, DEVICES, "device")
        check_choice(self.runtime, RUNTIMES, "runtime")
        check_choice(self.precision, PRECISIONS, "precision")
        if self.device != "cpu" and (self.runtime == "openvino" or self.precision == "bf16"):
            raise ConfigError(f"device: {self.device!r} runs on ONNX Runtime in fp32; use runtime 'onnxruntime' or "
                              "'auto' and precision 'fp32' or 'auto' with it")


@dataclass(frozen=True)
class Predictions:
    labels: np.ndarray  # (N,) int64, argmax of the probabilities
    probabilities: np.ndarray  # (N, L) float32, each row sums to 1


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (N, L) logits, stable for large values."""
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def with_model_windows(cfg: RuntimeConfig, metadata: dict[str, str]) -> RuntimeConfig:
    """``cfg`` with the windows it leaves unset taken from the model's contract (its ONNX metadata); a graph
    without one needs ``max_length`` and ``stride`` given, and is read with ``aggregate`` mean unless told."""
    if None not in (cfg.max_length, cfg.stride, cfg.aggregate):
        return cfg
    try:
        windows = onnx_contract(metadata, "the ONNX model").windows
    except ArtifactError as err:
        if cfg.max_length is None or cfg.stride is None:
            raise ConfigError(f"{err}; or give max_length and stride in RuntimeConfig") from None
        return replace(cfg, aggregate=cfg.aggregate or "mean")
    return replace(cfg, max_length=cfg.max_length or windows.max_length, stride=cfg.stride or windows.stride,
                   aggregate=cfg.aggregate or windows.aggregate)


def model_temperature(metadata: dict[str, str]) -> float:
    """The temperature the graph's contract records (``minibert.calibration``); 1.0 for a graph without one."""
    try:
        return onnx_contract(metadata, "the ONNX model").temperature
    except ArtifactError:
        return 1.0


def check_path(engine: Engine, parity: Parity, batch_size: int, pad_id: int) -> dict[str, float]:
    """``engine``'s logits of the record's windows against the torch fp32 logits the record carries."""
    got = batched_logits(engine, parity.windows, batch_size, pad_id)
    expected = np.asarray(parity.logits, dtype=np.float32)
    return {"argmax_agreement": float((got.argmax(1) == expected.argmax(1)).mean()),
            "max_abs_diff": float(np.abs(got - expected).max())}


def passes(result: dict[str, float], parity: Parity, precision: str) -> bool:
    """Whether a check's ``result`` is within the record's agreement and its logit tolerance for ``precision``."""
    return result["argmax_agreement"] >= parity.min_agreement and result["max_abs_diff"] <= parity.tolerance.get(precision, 0.0)


SINGLE_PROBES = 32  # of the record's probe windows, those timed one a call (``probe_timing``)


@dataclass(frozen=True)
class Timing:
    """A path's times here over a parity record's probe windows (``probe_timing``)."""

    batch_s: float  # all the windows in calls of ``batch_size``: throughput
    single_s: float  # the first ``SINGLE_PROBES`` windows, one a call: a one-text answer's latency

    @property
    def cost(self) -> float:
        """The product of the two times, which ``fastest`` keeps least: each counts by its ratio, so a path 8 %
        slower in batches and 1.5x faster on one window wins, and a tie in batches is settled by the latency (on an
        AVX512-BF16 host OpenVINO's fp32 and bf16 tie in batches of 32 and differ 1.5x on one text,
        benchmarks/JOURNAL.md)."""
        return self.batch_s * self.single_s


def probe_timing(engine: Engine, parity: Parity, batch_size: int, pad_id: int, repeats: int = 3) -> Timing:
    """``engine`` (as it serves: with its static shapes, ``Engine.with_static_shapes``) over the record's probe
    windows, in calls of ``batch_size`` and one window a call: each the best of ``repeats`` timed passes after one
    warm-up pass (which compiles the static shapes the windows take)."""
    singles = parity.windows[:SINGLE_PROBES]

    def best(windows: Sequence[Sequence[int]], size: int) -> float:
        batched_logits(engine, windows, size, pad_id)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            batched_logits(engine, windows, size, pad_id)
            times.append(time.perf_counter() - start)
        return min(times)

    return Timing(best(parity.windows, batch_size), best(singles, 1))


def fastest(timings: Mapping[K, Timing]) -> K:
    """The key of the least ``Timing.cost``."""
    return min(timings, key=lambda key: timings[key].cost)


# How far a smaller graph's cost may sit above the fastest's and still count as a tie (``smallest_of_fastest``): the
# probe's cost for one graph on one path moves by up to a fifth between rounds on a 2-core host (benchmarks/JOURNAL.md).
COST_TIE = 1.25


def smallest_of_fastest(timings: Mapping[K, Timing], sizes: Mapping[K, int], tie: float = COST_TIE) -> K:
    """Of the keys whose ``Timing.cost`` is within ``tie`` times the least, the one of fewest bytes (``sizes``): where
    the timing cannot tell graphs apart, the smaller ships."""
    least = timings[fastest(timings)].cost
    return min((key for key in timings if timings[key].cost <= tie * least), key=lambda key: (sizes[key], timings[key].cost))


def open_engine(onnx_path: str | os.PathLike[str], cfg: RuntimeConfig, pad_id: int) -> Engine:
    """The graph at ``onnx_path`` on the path ``cfg`` asks for, or with ``auto`` the fastest path measured here among
    those its parity record lists or that pass the record's check now (module docstring); the portable path for a
    graph without a record."""
    def load(path: str) -> Engine:
        return load_engine(onnx_path, path, threads=cfg.threads, optimization=cfg.optimization, device=cfg.device)

    try:
        candidates = matching_paths(cfg.runtime, cfg.precision)
    except ValueError as err:  # the host cannot run what is asked
        raise ConfigError(str(err)) from None
    named = len(candidates) == 1 and (cfg.runtime != "auto" or cfg.precision != "auto")
    portable = load(PORTABLE_PATH)  # runs any graph (ORT's contrib operators too) and reads its metadata
    if cfg.device != "cpu":
        return portable
    parity = onnx_parity(portable.metadata, str(onnx_path))
    if parity is None:  # nothing to check a path against: the portable path, or the one asked for, unchecked
        if candidates[0] == PORTABLE_PATH or not named:
            return portable
        log.warning("%s carries no parity record: %s runs unchecked", onnx_path, candidates[0])
        return load(candidates[0])

    def usable(path: str) -> Engine | None:
        """``path``'s engine where the record lists it or it passes the check here; None (or, named, an error).
        A path the record refused is left out before its engine is built (an OpenVINO compile costs seconds)."""
        if path in parity.refused:  # the full gate's verdict where it was built outweighs the probe's check here
            why = f"{onnx_path}: the gate refused {path} where it was built ({parity.refused[path]})"
            if named:
                raise ArtifactError(f"{why}; use runtime 'auto' or one of {sorted(parity.verified)}")
            log.info("%s; leaving it out", why)
            return None
        try:
            engine = portable if path == PORTABLE_PATH else load(path)
        except RuntimeError as err:  # e.g. OpenVINO cannot read ONNX Runtime's fused int8 operators
            why = f"{onnx_path} does not load on {path}: {str(err).strip().splitlines()[-1]}"
            if named:
                raise ArtifactError(why) from None
            log.info("%s; leaving it out", why)  # expected for ORT's fused int8 graph on OpenVINO
            return None
        if path in parity.verified:
            return engine
        result = check_path(engine, parity, cfg.batch_size, pad_id)
        if passes(result, parity, path.split("/")[1]):
            log.info("%s passed its parity check on %s here: %s", onnx_path, path, result)
            return engine
        failure = (f"{onnx_path} on {path}: argmax agreement {result['argmax_agreement']:.4f} (needs >= "
                   f"{parity.min_agreement}), max |logit diff| {result['max_abs_diff']:.3g} (limit "
                   f"{parity.tolerance.get(path.split('/')[1], 0.0):.3g}) on the {len(parity.windows)} windows of its "
                   "parity record")
        if named:
            raise ArtifactError(f"{failure}; use runtime 'auto' or the portable path (runtime 'onnxruntime')")
        log.warning("%s; leaving it out", failure)
        return None

    accepted = {path: engine for path in candidates if (engine := usable(path)) is not None}
    if not accepted:
        return portable
    if len(accepted) == 1:
        return next(iter(accepted.values()))
    max_length = with_model_windows(cfg, portable.metadata).max_length
    served = {path: engine.with_static_shapes(max_length, pad_id) for path, engine in accepted.items()}
    timings = {path: probe_timing(engine, parity, cfg.batch_size, pad_id) for path, engine in served.items()}
    chosen = fastest(timings)
    log.info("%s: probe ms by path here (batches of %d, one window a call) %s; running on %s", onnx_path,
             cfg.batch_size, {p: (round(1e3 * t.batch_s, 2), round(1e3 * t.single_s, 2)) for p, t in timings.items()},
             chosen)
    return served[chosen]  # its static shapes compiled by the probe, kept


class TextClassifier:
    """A tokenizer and an inference engine (``minibert.engines``) behind ``predict(texts)``."""

    def __init__(self, tokenizer: Tokenizer, engine: Engine, cfg: RuntimeConfig) -> None:
        self.tokenizer, self.engine, self.cfg = tokenizer, engine, cfg
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.cls_id, self.sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
        self.pad_id = tokenizer.token_to_id(PAD)
        # Ids only: encode_batch_fast (tokenizers >= 0.20) skips character offsets, about 25 % faster.
        self._encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        if None in (self.cls_id, self.sep_id, self.pad_id):
            raise ValueError(f"the tokenizer lacks {CLS}, {SEP} or {PAD}; use one trained by minibert.tokenizer")
        self.num_labels = engine.num_labels
        try:
            labels = onnx_contract(engine.metadata, "the ONNX model").labels
        except ArtifactError:
            labels = ()
        self.labels = labels or tuple(str(i) for i in range(self.num_labels))  # class names, in output order
        self.cfg = with_model_windows(cfg, engine.metadata)
        self.temperature = model_temperature(engine.metadata)
        self.engine = engine.with_static_shapes(self.cfg.max_length, self.pad_id)  # OpenVINO: small calls (engines)

    @property
    def path(self) -> str:
        """The path this classifier runs on (``runtime/precision``)."""
        return self.engine.path

    @classmethod
    def from_files(
        cls, tokenizer_path: str | os.PathLike[str], onnx_path: str | os.PathLike[str], cfg: RuntimeConfig | None = None
    ) -> TextClassifier:
        """Load ``tokenizer.json`` and an exported classifier (fp32, fused or int8 alike) on the path ``cfg`` picks."""
        cfg = cfg or RuntimeConfig()
        tokenizer = load_tokenizer(tokenizer_path)
        pad_id = tokenizer.token_to_id(PAD)
        return cls(tokenizer, open_engine(Path(onnx_path), cfg, 0 if pad_id is None else pad_id), cfg)

    def window_logits(self, windows: Sequence[Sequence[int]]) -> np.ndarray:
        """(W, L) logits of encoded windows, in input order."""
        if not windows:
            return np.empty((0, self.num_labels), dtype=np.float32)
        return batched_logits(self.engine, windows, self.cfg.batch_size, self.pad_id)

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """(N, L) logits, one row a text of any length (windows combined by ``cfg.aggregate``)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string; wrap it in a list")
        encoded = self._encode([encodable(t) for t in texts], add_special_tokens=False)
        windows, counts = document_windows([e.ids for e in encoded], self.cfg.max_length, self.cfg.stride,
                                           self.cls_id, self.sep_id)
        return aggregate_windows(self.window_logits(windows), counts, self.cfg.aggregate)

    def predict(self, texts: Sequence[str]) -> Predictions:
        """Labels and probabilities (calibrated: the logits divided by the temperature the model's file records) for
        each text; an empty list gives empty arrays."""
        probabilities = softmax(self.logits(texts) / self.temperature).astype(np.float32)
        return Predictions(labels=probabilities.argmax(axis=1).astype(np.int64), probabilities=probabilities)
