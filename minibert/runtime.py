"""The inference runtime: raw text -> tokenizer -> ONNX Runtime session -> labels and probabilities.

Reference: ONNX Runtime's Python API (``InferenceSession``) and the sliding-window reading of
long texts in ``minibert.windows``. The runtime holds one tokenizer and one session and does the
rest in numpy: texts are tokenized in one batched call, cut into windows, the windows run in
length-sorted batches (each padded only to its own longest window), and each text's window logits
are combined into one row. No torch on the hot path.

``RuntimeConfig.device`` picks the execution provider (``minibert.export.DEVICES``): ``cpu`` by
default; ``cuda`` / ``tensorrt`` when this onnxruntime build has them; ``auto`` takes the best one
present. ``threads`` and ``optimization`` set the session's intra-op threads and graph level.

Shape legend: N texts, W windows, T window length, L labels.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Tokenizer

from minibert.batching import batched_logits
from minibert.contract import onnx_contract
from minibert.export import DEVICES, OPTIMIZATION_LEVELS, load_session, onnx_logits
from minibert.files import ArtifactError
from minibert.tokenizer import CLS, PAD, SEP, encodable, load_tokenizer
from minibert.validation import ConfigError, check_choice, check_types
from minibert.windows import AGGREGATIONS, aggregate_windows, document_windows

if TYPE_CHECKING:  # annotations only
    import onnxruntime


@dataclass(frozen=True)
class RuntimeConfig:
    """How texts are read and how the session runs. The windows default to the model's own: what its
    file records (``minibert.contract``); set them only to read another way."""

    max_length: int | None = None  # tokens a window, [CLS] and [SEP] included
    stride: int | None = None  # window step for longer texts
    aggregate: str | None = None  # mean | max | first: window logits -> one row
    batch_size: int = 32  # windows a session call
    threads: int = 0  # intra-op threads; 0 lets ONNX Runtime choose
    optimization: str = "all"  # key of minibert.export.OPTIMIZATION_LEVELS
    device: str = "cpu"  # key of minibert.export.DEVICES

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


@dataclass(frozen=True)
class Predictions:
    labels: np.ndarray  # (N,) int64, argmax of the probabilities
    probabilities: np.ndarray  # (N, L) float32, each row sums to 1


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (N, L) logits, stable for large values."""
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def with_model_windows(cfg: RuntimeConfig, session: onnxruntime.InferenceSession) -> RuntimeConfig:
    """``cfg`` with the windows it leaves unset taken from the model's contract (its ONNX metadata); a graph
    without one needs ``max_length`` and ``stride`` given, and is read with ``aggregate`` mean unless told."""
    if None not in (cfg.max_length, cfg.stride, cfg.aggregate):
        return cfg
    try:
        windows = onnx_contract(session.get_modelmeta().custom_metadata_map, "the ONNX model").windows
    except ArtifactError as err:
        if cfg.max_length is None or cfg.stride is None:
            raise ConfigError(f"{err}; or give max_length and stride in RuntimeConfig") from None
        return replace(cfg, aggregate=cfg.aggregate or "mean")
    return replace(cfg, max_length=cfg.max_length or windows.max_length, stride=cfg.stride or windows.stride,
                   aggregate=cfg.aggregate or windows.aggregate)


def model_temperature(session: onnxruntime.InferenceSession) -> float:
    """The temperature the graph's contract records (``minibert.calibration``); 1.0 for a graph without one."""
    try:
        return onnx_contract(session.get_modelmeta().custom_metadata_map, "the ONNX model").temperature
    except ArtifactError:
        return 1.0


class TextClassifier:
    """A tokenizer and an ONNX classifier session behind ``predict(texts)``."""

    def __init__(self, tokenizer: Tokenizer, session: onnxruntime.InferenceSession, cfg: RuntimeConfig) -> None:
        self.tokenizer, self.session, self.cfg = tokenizer, session, cfg
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.cls_id, self.sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
        self.pad_id = tokenizer.token_to_id(PAD)
        # Ids only: encode_batch_fast (tokenizers >= 0.20) skips character offsets, about 25 % faster.
        self._encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        if None in (self.cls_id, self.sep_id, self.pad_id):
            raise ValueError(f"the tokenizer lacks {CLS}, {SEP} or {PAD}; use one trained by minibert.tokenizer")
        self.num_labels = int(session.get_outputs()[0].shape[-1])
        self.cfg = with_model_windows(cfg, session)
        self.temperature = model_temperature(session)

    @classmethod
    def from_files(
        cls, tokenizer_path: str | os.PathLike[str], onnx_path: str | os.PathLike[str], cfg: RuntimeConfig | None = None
    ) -> TextClassifier:
        """Load ``tokenizer.json`` and an exported classifier (fp32, fused or int8 alike)."""
        cfg = cfg or RuntimeConfig()
        session = load_session(Path(onnx_path), threads=cfg.threads, optimization=cfg.optimization, device=cfg.device)
        return cls(load_tokenizer(tokenizer_path), session, cfg)

    def window_logits(self, windows: Sequence[Sequence[int]]) -> np.ndarray:
        """(W, L) logits of encoded windows, in input order."""
        if not windows:
            return np.empty((0, self.num_labels), dtype=np.float32)
        return batched_logits(lambda ids, mask: onnx_logits(self.session, ids, mask), windows, self.cfg.batch_size,
                              self.pad_id)

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
