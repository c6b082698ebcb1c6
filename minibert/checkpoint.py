"""Save and load models as safetensors, with their configs in the file's metadata.

One file holds everything needed to rebuild the model: the weights and, as JSON strings in the
safetensors header, the ``ModelConfig``, the ``ClassifierConfig`` (classifiers only) and the
model kind. Writes are atomic (temp file in the same folder, then rename).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from minibert.config import ClassifierConfig, ModelConfig
from minibert.files import atomic_output
from minibert.model import MaskedLM, SequenceClassifier, build_classifier, build_mlm

KINDS: dict[type[nn.Module], str] = {MaskedLM: "mlm", SequenceClassifier: "classifier"}


def save_model(model: MaskedLM | SequenceClassifier, cfg: ModelConfig, path: str | os.PathLike[str],
               head_cfg: ClassifierConfig | None = None) -> Path:
    """Write weights + configs to ``path`` atomically."""
    kind = KINDS[type(model)]
    if kind == "classifier" and head_cfg is None:
        raise ValueError("saving a classifier needs its ClassifierConfig")
    metadata = {"kind": kind, "model_config": json.dumps(dataclasses.asdict(cfg))}
    if head_cfg is not None:
        metadata["classifier_config"] = json.dumps(dataclasses.asdict(head_cfg))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    with atomic_output(path) as tmp:
        save_file(state, str(tmp), metadata=metadata)
    return Path(path)


def read_metadata(path: str | os.PathLike[str]) -> tuple[str, ModelConfig, ClassifierConfig | None]:
    """(kind, model config, classifier config or None) from a checkpoint's header."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; run the stage that writes it first")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{path} is not a readable safetensors checkpoint: {err}") from err
    if "kind" not in meta or "model_config" not in meta:
        raise ValueError(f"{path} has no minibert metadata (kind, model_config); was it written by save_model?")
    cfg = ModelConfig.from_dict(json.loads(meta["model_config"]))
    head = ClassifierConfig(**json.loads(meta["classifier_config"])) if "classifier_config" in meta else None
    return meta["kind"], cfg, head


def load_model(path: str | os.PathLike[str]) -> tuple[MaskedLM | SequenceClassifier, ModelConfig, ClassifierConfig | None]:
    """Rebuild the model a checkpoint was saved from; returns it in eval mode with its configs."""
    kind, cfg, head = read_metadata(path)
    model: MaskedLM | SequenceClassifier = build_mlm(cfg) if kind == "mlm" else build_classifier(cfg, head)
    model.load_state_dict(load_file(str(path)), strict=True)
    return model.eval(), cfg, head
