"""minibert: a from-scratch BERT library (torch and tokenizers only).

Import map: config (ModelConfig, presets), choices (the names a config may choose), train_config
(OptimConfig, LoopConfig, PPMIConfig), attention, positional, layers, heads, model (build_mlm,
build_classifier), tokenizer (train_wordpiece), hf_interop (transformers interop, imports
transformers lazily). This package never imports the pipeline, mlflow, prefect or dvc.

``import minibert`` and the config modules do not import torch: the model names below load
``minibert.model`` (and torch) on first use, so a process that only reads configs starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from minibert.config import PRESETS, ClassifierConfig, ModelConfig
from minibert.validation import ConfigError

if TYPE_CHECKING:
    from minibert.model import Backbone, MaskedLM, SequenceClassifier, build_backbone, build_classifier, build_mlm

_FROM_MODEL = ("Backbone", "MaskedLM", "SequenceClassifier", "build_backbone", "build_classifier", "build_mlm")

__all__ = [
    "PRESETS",
    "Backbone",
    "ClassifierConfig",
    "ConfigError",
    "MaskedLM",
    "ModelConfig",
    "SequenceClassifier",
    "build_backbone",
    "build_classifier",
    "build_mlm",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_MODEL:
        return getattr(importlib.import_module("minibert.model"), name)
    raise AttributeError(f"module 'minibert' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
