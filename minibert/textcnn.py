"""A word-level convolutional text classifier (Kim 2014, "Convolutional Neural Networks for
Sentence Classification"), over the encoder's pretrained word vectors.

Reference: one embedding layer, parallel 1-D convolutions of several widths, ReLU, max-pooling
over time, dropout, a linear layer. Differences: the widths default to 1-5 (Kim: 3-5), padding
positions are masked out of the max (Kim pads every sentence to one length), and the inputs
scale the word vectors to unit standard deviation (BERT-style vectors have std ~0.02, which would
leave the convolutions' ReLUs at their initial bias). It takes the encoder's ``(ids, mask)`` so
that the classifier's batching, validation and scoring code serve it unchanged.

``vectors`` is Kim's choice for the word vectors: ``non_static`` (trained on, the default),
``static`` (frozen) or ``multichannel`` (a frozen copy beside the trained one, the convolutions
reading both: Kim's channels, concatenated on the feature axis, so each filter has its own
weights for either copy). A frozen copy keeps the corpus's view of words the training rows seldom
move, where a trained-on table drifts for the words it sees.

With ``bag_buckets`` above 0 a bag of hashed token n-grams (``minibert.ngram_bag``, fastText)
adds its logits to the convolutions': the whole text's n-gram frequencies, a linear view that
TF-IDF + LR takes and max-pooled filters do not.

Shapes: B batch, T tokens, D embedding width, F filters of each width, W widths, L labels.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor, nn

from minibert.checkpoint import write_weights
from minibert.contract import Contract, Windows
from minibert.files import ArtifactError
from minibert.ngram_bag import NGramBag
from minibert.validation import ConfigError, check_types

MASKED = -1e4  # a padding position's activation before the max: below any ReLU output


@dataclass(frozen=True)
class TextCNNConfig:
    vocab_size: int
    dim: int  # word-vector width (the encoder's hidden size when its vectors are reused)
    widths: tuple[int, ...] = (1, 2, 3, 4, 5)  # n-gram widths of the convolutions
    filters: int = 128  # feature maps per width
    dropout: float = 0.5  # on the pooled features (Kim: 0.5)
    num_labels: int = 2
    pad_id: int = 0
    bag_buckets: int = 0  # hashed n-gram slots of the bag-of-n-grams branch (0 = no bag)
    bag_ngrams: int = 2  # n-gram lengths 1..bag_ngrams in the bag
    vectors: Literal["non_static", "static", "multichannel"] = "non_static"  # Kim's word-vector channels

    def __post_init__(self) -> None:
        check_types(self)
        if not self.widths or min(self.widths) < 1:
            raise ConfigError(f"widths: {self.widths} needs at least one width, each >= 1")
        if self.filters < 1 or self.dim < 1 or self.vocab_size < 1:
            raise ConfigError(f"filters {self.filters}, dim {self.dim} and vocab_size {self.vocab_size} must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout: {self.dropout} is out of range; expected [0, 1)")
        if self.num_labels < 2:
            raise ConfigError(f"num_labels: {self.num_labels} must be >= 2")
        if not 0 <= self.bag_buckets <= 2**24 or self.bag_ngrams < 1:
            raise ConfigError(f"bag_buckets {self.bag_buckets} must be in [0, 2**24] and bag_ngrams {self.bag_ngrams} >= 1")


class TextCNN(nn.Module):
    def __init__(self, embedding: nn.Embedding, input_scale: float, widths: tuple[int, ...], filters: int,
                 dropout: float, num_labels: int, bag: NGramBag | None = None, static: nn.Embedding | None = None) -> None:
        super().__init__()
        self.embedding = embedding
        self.static = static  # multichannel: a frozen copy of the vectors, read beside the trained one
        self.register_buffer("input_scale", torch.tensor(float(input_scale)))
        dim = embedding.embedding_dim * (1 if static is None else 2)
        # padding w - 1 on both sides: every n-gram that overlaps the text, the first and last included
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, w, padding=w - 1) for w in widths)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(len(widths) * filters, num_labels)
        self.bag = bag

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """(B, T) ids, (B, T) mask (1 = token) -> (B, L) logits."""
        mask = (ids != self.embedding.padding_idx) if mask is None else mask.bool()
        x = self.embedding(ids) if self.static is None else torch.cat([self.embedding(ids), self.static(ids)], dim=-1)
        x = (x * self.input_scale).transpose(1, 2)  # (B, D, T); D doubled with the static channel
        pooled = []
        for conv in self.convs:
            h = torch.relu(conv(x))[:, :, : ids.shape[1]]  # (B, F, T): the n-grams starting at each position
            pooled.append(h.masked_fill(~mask[:, None, :], MASKED).amax(dim=-1))  # (B, F)
        logits = self.classifier(self.dropout(torch.cat(pooled, dim=1)))  # (B, W * F) -> (B, L)
        return logits if self.bag is None else logits + self.bag(ids, mask)


def build_textcnn(cfg: TextCNNConfig, vectors: Tensor | None = None) -> TextCNN:
    """A TextCNN; ``vectors`` (V, D), e.g. a pretrained encoder's word embeddings, initialise its
    embedding (trained on unless ``cfg.vectors`` is ``static``) and a multichannel model's frozen
    copy, else N(0, 1). The input scale makes their standard deviation 1."""
    if vectors is not None and tuple(vectors.shape) != (cfg.vocab_size, cfg.dim):
        raise ConfigError(f"word vectors of shape {tuple(vectors.shape)} do not fit vocab_size {cfg.vocab_size} x dim {cfg.dim}")
    embedding = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_id)
    scale = 1.0
    if vectors is not None:
        with torch.no_grad():
            embedding.weight.copy_(vectors)
        scale = 1.0 / max(float(vectors.float().std()), 1e-8)
    static = None
    if cfg.vectors == "multichannel":
        static = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_id)
        with torch.no_grad():
            static.weight.copy_(embedding.weight)
        static.weight.requires_grad_(False)
    elif cfg.vectors == "static":
        embedding.weight.requires_grad_(False)
    bag = NGramBag(cfg.vocab_size, cfg.bag_buckets, cfg.bag_ngrams, cfg.num_labels) if cfg.bag_buckets else None
    return TextCNN(embedding, scale, tuple(cfg.widths), cfg.filters, cfg.dropout, cfg.num_labels, bag, static)


def bag_lr_scale(scale: float) -> Callable[[str], float]:
    """``build_optimizer``'s ``lr_scale``: the bag's weights (a sparse linear model, each row seen a few
    times an epoch) at ``scale`` times the learning rate, the rest at 1."""
    return lambda name: scale if "bag" in name.split(".") else 1.0


def save_textcnn(model: TextCNN, cfg: TextCNNConfig, path: str | os.PathLike[str], vocabulary: str | None = None,
                 reads: tuple[Windows, Sequence[str]] | None = None) -> Path:
    """Weights and config (+ the tokenizer's ``vocabulary_digest``, + its windows and label names: its
    ``minibert.contract``) to ``path``, atomically."""
    metadata = {"kind": "textcnn", "textcnn_config": json.dumps(dataclasses.asdict(cfg))}
    if vocabulary is not None:
        metadata["vocabulary_sha256"] = vocabulary
    if reads is not None:
        metadata |= Contract("textcnn", vocabulary, reads[0], tuple(reads[1])).metadata()
    return write_weights(model, path, metadata)


def load_textcnn(path: str | os.PathLike[str]) -> tuple[TextCNN, TextCNNConfig]:
    """The TextCNN ``save_textcnn`` wrote, in eval mode; ``ArtifactError`` names a damaged or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no word-CNN checkpoint at {path}; run `dvc repro cnn` first")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("minibert", "{}"))
        state = load_file(str(path))
    except (SafetensorError, OSError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{path} is not a readable safetensors checkpoint ({err}); delete it and rerun `dvc repro cnn`") from err
    if meta.get("kind") != "textcnn":
        raise ArtifactError(f"{path} is not a word-CNN checkpoint (kind {meta.get('kind')!r}); was it written by save_textcnn?")
    raw = json.loads(meta["textcnn_config"])
    cfg = TextCNNConfig(**{**raw, "widths": tuple(raw["widths"])})
    model = build_textcnn(cfg)
    model.load_state_dict(state)
    return model.eval(), cfg
