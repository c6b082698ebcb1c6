"""Save and load models as safetensors, with their configs in the file's metadata.

One file holds everything needed to rebuild the model: the weights and, as JSON strings in the
safetensors header, the ``ModelConfig``, the ``ClassifierConfig`` (classifiers only), the
model kind and the digest of the tokenizer vocabulary it was trained with (``check_tokenizer``
refuses another tokenizer). Writes are atomic (temp file in the same folder, then rename); a
damaged or truncated file raises ``ArtifactError`` naming it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

from minibert.config import ClassifierConfig, ModelConfig
from minibert.contract import Contract, Windows
from minibert.files import ArtifactError, atomic_output
from minibert.model import MaskedLM, SequenceClassifier, build_classifier, build_mlm
from minibert.tokenizer import vocabulary_digest

KINDS: dict[type[nn.Module], str] = {MaskedLM: "mlm", SequenceClassifier: "classifier"}
CONFIG_KEYS = {"model_config", "textcnn_config"}  # a header holds one: minibert's, or the word-CNN's (minibert.textcnn)


def save_model(model: MaskedLM | SequenceClassifier, cfg: ModelConfig, path: str | os.PathLike[str],
               head_cfg: ClassifierConfig | None = None, vocabulary: str | None = None,
               reads: tuple[Windows, Sequence[str]] | None = None) -> Path:
    """Write weights + configs (+ the tokenizer's ``vocabulary_digest``, + a classifier's windows and label
    names: its ``minibert.contract``) to ``path`` atomically."""
    kind = KINDS[type(model)]
    if kind == "classifier" and head_cfg is None:
        raise ValueError("saving a classifier needs its ClassifierConfig")
    metadata = {"kind": kind, "model_config": json.dumps(dataclasses.asdict(cfg))}
    if head_cfg is not None:
        metadata["classifier_config"] = json.dumps(dataclasses.asdict(head_cfg))
    if vocabulary is not None:
        metadata["vocabulary_sha256"] = vocabulary
    if reads is not None:
        metadata |= Contract(kind, vocabulary, reads[0], tuple(reads[1])).metadata()
    return write_weights(model, path, metadata)


def read_contract(path: str | os.PathLike[str]) -> Contract:
    """A classifier checkpoint's contract (kind, vocabulary, windows, label names); ArtifactError if it has none."""
    return Contract.from_metadata(_header(Path(path)), str(path))


def write_weights(model: nn.Module, path: str | os.PathLike[str], metadata: dict[str, str]) -> Path:
    """``model``'s state as safetensors at ``path`` (atomically), ``metadata`` under the header's one key."""
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with atomic_output(path) as tmp:
        # one key: safetensors writes several in hash order, so equal models would differ in bytes
        save_file(state, str(tmp), metadata={"minibert": json.dumps(metadata, sort_keys=True)})
    return Path(path)


def _header(path: Path) -> dict[str, str]:
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; run the stage that writes it first")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        meta = json.loads(meta["minibert"]) if "minibert" in meta else meta  # files before the single key
    except (SafetensorError, OSError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{path} is not a readable safetensors checkpoint (truncated or damaged: {err}); "
                            "delete it and rerun the stage that writes it") from err
    if "kind" not in meta or not CONFIG_KEYS & meta.keys():
        raise ArtifactError(f"{path} has no minibert metadata (kind, model_config); was it written by save_model?")
    return meta


def header(path: str | os.PathLike[str]) -> dict[str, str]:
    """A checkpoint's minibert metadata (``kind``, its config as JSON, ``vocabulary_sha256``); ArtifactError if none."""
    return _header(Path(path))


def read_metadata(path: str | os.PathLike[str]) -> tuple[str, ModelConfig, ClassifierConfig | None]:
    """(kind, model config, classifier config or None) from a checkpoint's header."""
    path = Path(path)
    meta = _header(path)
    if "model_config" not in meta:
        raise ArtifactError(f"{path} holds a {meta['kind']} model, not a minibert encoder; load it with "
                            "minibert.classifiers.load_classifier")
    cfg = ModelConfig.from_dict(json.loads(meta["model_config"]))
    head = ClassifierConfig(**json.loads(meta["classifier_config"])) if "classifier_config" in meta else None
    return meta["kind"], cfg, head


def load_model(path: str | os.PathLike[str]) -> tuple[MaskedLM | SequenceClassifier, ModelConfig, ClassifierConfig | None]:
    """Rebuild the model a checkpoint was saved from; returns it in eval mode with its configs."""
    kind, cfg, head = read_metadata(path)
    model: MaskedLM | SequenceClassifier = build_mlm(cfg) if kind == "mlm" else build_classifier(cfg, head)
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ArtifactError(f"{path}: the weights are unreadable (truncated or damaged: {err}); "
                            "delete it and rerun the stage that writes it") from err
    model.load_state_dict(state, strict=True)
    return model.eval(), cfg, head


def check_tokenizer(path: str | os.PathLike[str], tok: Tokenizer, tokenizer_path: str | os.PathLike[str]) -> None:
    """ArtifactError unless ``tok`` is the tokenizer the checkpoint at ``path`` was trained with:
    the same vocabulary digest when the checkpoint records one, else the same vocabulary size."""
    path = Path(path)
    meta = _header(path)
    recorded = meta.get("vocabulary_sha256")
    size = int(json.loads(meta.get("model_config") or meta["textcnn_config"])["vocab_size"])
    if recorded is not None and recorded != vocabulary_digest(tok):
        raise ArtifactError(f"{tokenizer_path} is not the tokenizer {path} was trained with (vocabulary digest "
                            f"{vocabulary_digest(tok)[:12]} vs {recorded[:12]}); use that run's tokenizer.json, "
                            "or retrain the model with this one")
    if tok.get_vocab_size() != size:
        raise ArtifactError(f"{tokenizer_path} has {tok.get_vocab_size()} tokens but {path} was trained with a vocabulary "
                            f"of {size}; use that run's tokenizer.json, or retrain the model with this one")
