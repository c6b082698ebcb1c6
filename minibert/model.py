"""The BERT backbone, its task models, and the builders that turn configs into modules.

Reference: ``transformers.BertModel`` / ``BertForMaskedLM`` / ``BertForSequenceClassification``;
with ``position="learned"``, ``norm_style="post"`` and ``activation="gelu"`` the maths is the
same and weights convert both ways (``minibert.hf_interop``). Departures: see attention.py
(fused QKV, pluggable core), heads.py (sparse MLM head, pooling choice) and layers.py (pre-norm).
Forward passes return plain tensors so that torch.onnx and torch.compile see no wrappers.

Shape legend: B batch, T sequence length, C hidden size, V vocabulary, L labels, H heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from minibert.attention import SelfAttention
from minibert.config import ClassifierConfig, ModelConfig
from minibert.heads import ClassifierHead, MLMHead
from minibert.layers import NORM_STYLES, Encoder, FeedForward
from minibert.positional import POSITIONS, Rotary


class Embeddings(nn.Module):
    """token + segment (+ absolute position) embeddings -> LayerNorm -> dropout."""

    def __init__(
        self,
        tokens: nn.Embedding,
        segments: nn.Embedding,
        positions: nn.Module | None,
        hidden_size: int,
        layer_norm_eps: float,
        dropout: float,
    ) -> None:
        super().__init__()
        self.tokens = tokens
        self.segments = segments
        self.positions = positions  # None with rotary positions, which act inside attention
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
        """input_ids, token_type_ids: (B, T) int64 -> (B, T, C)."""
        x = self.tokens(input_ids)
        if token_type_ids is None:
            x = x + self.segments.weight[0]  # all segment 0, without materialising the ids
        else:
            x = x + self.segments(token_type_ids)
        if self.positions is not None:
            x = x + self.positions(input_ids.shape[1])  # (T, C) broadcast over B
        return self.dropout(self.norm(x))


def key_mask(attention_mask: Tensor | None) -> Tensor | None:
    """(B, T) 1/0 or bool -> bool (B, 1, 1, T) broadcastable over heads and queries."""
    if attention_mask is None:
        return None
    return attention_mask.bool()[:, None, None, :]


class Backbone(nn.Module):
    """Embeddings followed by the encoder stack."""

    def __init__(self, embeddings: Embeddings, encoder: Encoder) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.encoder = encoder

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Returns hidden states (B, T, C) and, with ``need_weights``, one (B, H, T, T) per layer.

        attention_mask (B, T): 1 (or True) for real tokens, 0 for padding; None means no padding.
        """
        x = self.embeddings(input_ids, token_type_ids)
        return self.encoder(x, key_mask(attention_mask), need_weights)


class MaskedLM(nn.Module):
    """Backbone + MLM head whose decoder is the word-embedding matrix."""

    def __init__(self, backbone: Backbone, head: MLMHead) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        masked_positions: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, T, V), or (N, V) at ``masked_positions``: the True entries of a bool (B, T)
        mask, or int64 (N,) indices into the flattened B * T positions (``MLMHead``)."""
        hidden, _ = self.backbone(input_ids, attention_mask, token_type_ids)
        return self.head(hidden, self.backbone.embeddings.tokens.weight, masked_positions)


class SequenceClassifier(nn.Module):
    """Backbone + pooled classification head."""

    def __init__(self, backbone: Backbone, head: ClassifierHead) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, L)."""
        hidden, _ = self.backbone(input_ids, attention_mask, token_type_ids)
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        return self.head(hidden, mask)


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """(all parameters, non-embedding parameters): the size measure distillation targets use. Embedding
    parameters: a minibert's ``backbone.embeddings``, a word-CNN's (``minibert.textcnn``) ``embedding``,
    frozen ``static`` copy and n-gram ``bag`` (lookup tables: no compute per parameter)."""
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("backbone.embeddings.", "embedding.", "static.", "bag.")))
    return total, total - embedding


def set_gradient_checkpointing(model: nn.Module, enabled: bool) -> None:
    """Trade compute for memory in training: recompute layer activations during backward."""
    for module in model.modules():
        if isinstance(module, Encoder):
            module.gradient_checkpointing = enabled


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, std) for linear and embedding weights, zero biases, unit norms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build_backbone(cfg: ModelConfig) -> Backbone:
    """Embeddings and encoder for ``cfg``, initialised as BERT."""
    position_cls = POSITIONS[cfg.position]
    # a fixed sinusoidal table at the scale of the token embeddings (RMS = initializer_range)
    position_kwargs = {"scale": cfg.initializer_range * math.sqrt(2)} if cfg.position == "sinusoidal" else {}
    rotary = Rotary(cfg.head_size, cfg.max_positions, cfg.rope_base) if cfg.position == "rotary" else None
    embeddings = Embeddings(
        tokens=nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id),
        segments=nn.Embedding(cfg.type_vocab_size, cfg.hidden_size),
        positions=None if position_cls is None else position_cls(cfg.max_positions, cfg.hidden_size, **position_kwargs),
        hidden_size=cfg.hidden_size,
        layer_norm_eps=cfg.layer_norm_eps,
        dropout=cfg.hidden_dropout,
    )
    layer_cls = NORM_STYLES[cfg.norm_style]
    layers = [
        layer_cls(
            attention=SelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout, cfg.attention, rotary),
            feed_forward=FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.activation),
            hidden_size=cfg.hidden_size,
            hidden_dropout=cfg.hidden_dropout,
            layer_norm_eps=cfg.layer_norm_eps,
        )
        for _ in range(cfg.num_layers)
    ]
    final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.norm_style == "pre" else None
    backbone = Backbone(embeddings, Encoder(layers, final_norm))
    init_weights(backbone, cfg.initializer_range)
    return backbone


def build_mlm(cfg: ModelConfig) -> MaskedLM:
    """A masked language model for pretraining."""
    head = MLMHead(cfg.hidden_size, cfg.vocab_size, cfg.layer_norm_eps)
    init_weights(head, cfg.initializer_range)
    return MaskedLM(build_backbone(cfg), head)


def build_classifier(cfg: ModelConfig, head_cfg: ClassifierConfig, backbone: Backbone | None = None) -> SequenceClassifier:
    """A sequence classifier; pass a pretrained ``backbone`` to fine-tune it (else a fresh one)."""
    head = ClassifierHead(cfg.hidden_size, head_cfg.num_labels, head_cfg.pooling, head_cfg.dropout)
    init_weights(head, cfg.initializer_range)
    return SequenceClassifier(backbone if backbone is not None else build_backbone(cfg), head)
