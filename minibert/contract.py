"""What a model file promises its user: how it reads a text and what its outputs mean.

Every classifier the pipeline writes carries one: the safetensors checkpoints in their header
(``minibert.checkpoint``), the ONNX graphs in their ``metadata_props`` under the key ``minibert``
(``stamp_onnx``). Export, quantization, evaluation, registration and serving read it from the file,
so a model is used the way it was trained whatever the params say now.

    kind               classifier (a minibert encoder) | textcnn (the word-level CNN)
    vocabulary_sha256  the tokenizer it was trained with (``minibert.tokenizer.vocabulary_digest``)
    windows            max_length (tokens a window, [CLS] and [SEP] included), stride, aggregate
    labels             the class names, in output order
    temperature        what the logits are divided by before the softmax (``minibert.calibration``; 1 = as trained)

Torch-free: serving reads it through ONNX Runtime alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minibert.files import ArtifactError, atomic_output

ONNX_KEY = "minibert"  # the metadata_props entry of an exported graph
PARITY_KEY = "minibert_parity"  # the entry with its parity record (``Parity``)


@dataclass(frozen=True)
class Windows:
    """How a model reads a text: windows of ``max_length`` tokens every ``stride``, logits combined by ``aggregate``."""

    max_length: int
    stride: int
    aggregate: str


@dataclass(frozen=True)
class Contract:
    kind: str
    vocabulary_sha256: str | None
    windows: Windows
    labels: tuple[str, ...]
    temperature: float = 1.0

    def metadata(self) -> dict[str, str]:
        """The entries a file's metadata holds (strings: safetensors' and ONNX's metadata are string maps)."""
        return {"kind": self.kind, **({"vocabulary_sha256": self.vocabulary_sha256} if self.vocabulary_sha256 else {}),
                "windows": json.dumps(vars(self.windows), sort_keys=True), "labels": json.dumps(list(self.labels)),
                **({"temperature": repr(self.temperature)} if self.temperature != 1.0 else {})}

    @classmethod
    def from_metadata(cls, meta: dict[str, Any], where: str) -> Contract:
        """The contract in a file's metadata; ArtifactError naming ``where`` when it holds none."""
        if "windows" not in meta or "labels" not in meta:
            raise ArtifactError(f"{where} carries no windows or labels (written before models carried their contract); "
                                "rerun the stage that writes it")
        try:
            windows = Windows(**json.loads(meta["windows"]))
            labels = tuple(str(label) for label in json.loads(meta["labels"]))
            temperature = float(meta.get("temperature", 1.0))
        except (TypeError, ValueError) as err:
            raise ArtifactError(f"{where}: unreadable windows, labels or temperature in its metadata ({err})") from err
        if not temperature > 0:
            raise ArtifactError(f"{where}: temperature {temperature} in its metadata is not above 0; rerun `dvc repro quantize`")
        return cls(str(meta.get("kind", "")), meta.get("vocabulary_sha256"), windows, labels, temperature)


def _set_onnx_metadata(path: str | os.PathLike[str], key: str, value: str) -> None:
    """Set one ``metadata_props`` entry of the ONNX graph at ``path``, replacing the file atomically."""
    import onnx  # export-time only: serving reads the stamp through its runtime

    model = onnx.load(str(path))
    kept = [p for p in model.metadata_props if p.key != key]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value
    with atomic_output(path) as tmp:
        onnx.save(model, str(tmp))


def stamp_onnx(path: str | os.PathLike[str], contract: Contract) -> None:
    """Write ``contract`` into the ONNX graph at ``path`` (its ``metadata_props``), replacing the file atomically."""
    _set_onnx_metadata(path, ONNX_KEY, json.dumps(contract.metadata(), sort_keys=True))


def onnx_contract(custom_metadata: dict[str, str], where: str) -> Contract:
    """The contract of an ONNX graph from its custom metadata map (``session.get_modelmeta().custom_metadata_map``)."""
    if ONNX_KEY not in custom_metadata:
        raise ArtifactError(f"{where} carries no minibert contract (exported before models carried one); rerun "
                            "`dvc repro export`")
    return Contract.from_metadata(json.loads(custom_metadata[ONNX_KEY]), where)


def read_onnx_contract(path: str | os.PathLike[str]) -> Contract:
    """The contract stamped into the ONNX graph at ``path``."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX model at {path}; run the stage that writes it first")
    model = onnx.load(str(path), load_external_data=False)
    return onnx_contract({p.key: p.value for p in model.metadata_props}, str(path))


@dataclass(frozen=True)
class Parity:
    """Which inference paths (``minibert.engines``: ``runtime/precision``) a graph was verified on, and how to verify
    another: ``verified`` maps a path to what its check measured against the torch fp32 model on the test split of
    record (``argmax_agreement``, ``max_abs_diff``, ``accuracy_delta``); ``windows`` are token-id windows of that split
    and ``logits`` the torch fp32 model's logits of them (W x L), which a host that picks an unlisted path runs
    through it before it answers (``minibert.runtime``), held to ``min_agreement`` and ``tolerance[precision]``
    (the largest logit difference allowed for a path computing in that precision). ``refused`` maps a path the gate
    refused where the graph was built to why: no host serves the graph on it (``minibert.runtime``)."""

    verified: dict[str, dict[str, float]]
    windows: tuple[tuple[int, ...], ...]
    logits: tuple[tuple[float, ...], ...]
    tolerance: dict[str, float]
    min_agreement: float
    refused: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"verified": self.verified, "windows": self.windows, "logits": self.logits,
                           "tolerance": self.tolerance, "min_agreement": self.min_agreement, "refused": self.refused},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Parity:
        try:
            raw = json.loads(text)
            return cls({str(k): {str(m): float(x) for m, x in v.items()} for k, v in raw["verified"].items()},
                       tuple(tuple(int(i) for i in w) for w in raw["windows"]),
                       tuple(tuple(float(x) for x in row) for row in raw["logits"]),
                       {str(k): float(v) for k, v in raw["tolerance"].items()}, float(raw["min_agreement"]),
                       {str(k): str(v) for k, v in raw.get("refused", {}).items()})  # absent in records before it
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ArtifactError(f"{where}: unreadable {PARITY_KEY} metadata ({err!r}); rerun `dvc repro quantize`") from err


def stamp_parity(path: str | os.PathLike[str], parity: Parity) -> None:
    """Write ``parity`` into the ONNX graph at ``path`` (``metadata_props[PARITY_KEY]``), atomically."""
    _set_onnx_metadata(path, PARITY_KEY, parity.to_json())


def onnx_parity(custom_metadata: dict[str, str], where: str) -> Parity | None:
    """The parity record of an ONNX graph from its metadata map; None for a graph without one."""
    return Parity.from_json(custom_metadata[PARITY_KEY], where) if PARITY_KEY in custom_metadata else None
