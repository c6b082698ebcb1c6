"""minibert: a from-scratch BERT library (torch and tokenizers only).

Import map: config (ModelConfig, presets), attention, positional, layers, heads, model
(build_mlm, build_classifier), tokenizer (train_wordpiece), hf_interop (transformers interop,
imports transformers lazily). This package never imports the pipeline, mlflow, prefect or dvc.
"""

from minibert.config import PRESETS, ClassifierConfig, ModelConfig
from minibert.model import (
    Backbone,
    MaskedLM,
    SequenceClassifier,
    build_backbone,
    build_classifier,
    build_mlm,
)
from minibert.validation import ConfigError

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
