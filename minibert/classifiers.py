"""Any saved sentence classifier, by the kind its checkpoint records: a minibert ``SequenceClassifier``
(``minibert.checkpoint``) or a word-level CNN (``minibert.textcnn``). Both map ``(input_ids,
attention_mask)`` (B, T) to logits (B, L), so scoring, export and quantization take either.
"""

from __future__ import annotations

import os

from torch import nn

from minibert.checkpoint import header, load_model
from minibert.files import ArtifactError
from minibert.textcnn import load_textcnn


def load_classifier(path: str | os.PathLike[str]) -> nn.Module:
    """The classifier saved at ``path``, in eval mode; ArtifactError names a file that holds none."""
    kind = header(path)["kind"]
    if kind == "textcnn":
        return load_textcnn(path)[0]
    if kind != "classifier":
        raise ArtifactError(f"{path} holds a {kind} model, not a sentence classifier; pass a fine-tuned or distilled checkpoint")
    return load_model(path)[0]
