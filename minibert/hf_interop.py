"""Convert weights between minibert and Hugging Face ``transformers`` BERT, both ways.

Everything named after Hugging Face's layout lives here, in one declarative key map
(the pattern of torchtitan's ``state_dict_adapter.py``). Each rule maps one of our keys to one
HF key, or to several HF keys concatenated on dim 0 (our fused QKV is HF's query, key and value
stacked). Conversion refuses to run unless every key on both sides is mapped or explicitly
ignored, so a renamed parameter can never be silently dropped.

Compatible subset: ``position="learned"``, ``norm_style="post"``, activation gelu or relu,
and for classifiers ``pooling="cls"`` (HF's pooler reads [CLS]); anything else raises.
``transformers`` is imported lazily, only by the functions that build HF objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from minibert.config import ClassifierConfig, ModelConfig
from minibert.heads import cls_pool
from minibert.model import MaskedLM, SequenceClassifier, build_classifier, build_mlm
from minibert.positional import LearnedPositions


@dataclass(frozen=True)
class KeyRule:
    ours: str
    hf: tuple[str, ...]  # more than one: concatenated along dim 0 into ours


def _rule(ours: str, *hf: str) -> KeyRule:
    return KeyRule(ours, hf)


BACKBONE_RULES = (
    _rule("backbone.embeddings.tokens.weight", "bert.embeddings.word_embeddings.weight"),
    _rule("backbone.embeddings.segments.weight", "bert.embeddings.token_type_embeddings.weight"),
    _rule("backbone.embeddings.positions.table.weight", "bert.embeddings.position_embeddings.weight"),
    _rule("backbone.embeddings.norm.weight", "bert.embeddings.LayerNorm.weight"),
    _rule("backbone.embeddings.norm.bias", "bert.embeddings.LayerNorm.bias"),
)

# "{i}" is the layer index on both sides.
LAYER_RULES = tuple(
    _rule(f"backbone.encoder.layers.{{i}}.{ours}", *(f"bert.encoder.layer.{{i}}.{h}" for h in hf))
    for ours, *hf in (
        ("attention.qkv.weight", "attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight"),
        ("attention.qkv.bias", "attention.self.query.bias", "attention.self.key.bias", "attention.self.value.bias"),
        ("attention.out.weight", "attention.output.dense.weight"),
        ("attention.out.bias", "attention.output.dense.bias"),
        ("attention_norm.weight", "attention.output.LayerNorm.weight"),
        ("attention_norm.bias", "attention.output.LayerNorm.bias"),
        ("feed_forward.up.weight", "intermediate.dense.weight"),
        ("feed_forward.up.bias", "intermediate.dense.bias"),
        ("feed_forward.down.weight", "output.dense.weight"),
        ("feed_forward.down.bias", "output.dense.bias"),
        ("feed_forward_norm.weight", "output.LayerNorm.weight"),
        ("feed_forward_norm.bias", "output.LayerNorm.bias"),
    )
)

HEAD_RULES: dict[type[nn.Module], tuple[KeyRule, ...]] = {
    MaskedLM: (
        _rule("head.dense.weight", "cls.predictions.transform.dense.weight"),
        _rule("head.dense.bias", "cls.predictions.transform.dense.bias"),
        _rule("head.norm.weight", "cls.predictions.transform.LayerNorm.weight"),
        _rule("head.norm.bias", "cls.predictions.transform.LayerNorm.bias"),
        _rule("head.bias", "cls.predictions.bias"),
    ),
    SequenceClassifier: (
        _rule("head.pooler.weight", "bert.pooler.dense.weight"),
        _rule("head.pooler.bias", "bert.pooler.dense.bias"),
        _rule("head.classifier.weight", "classifier.weight"),
        _rule("head.classifier.bias", "classifier.bias"),
    ),
}

# HF keys that alias another HF key (tied weights): written on export, ignored on import.
HF_ALIASES: dict[type[nn.Module], dict[str, str]] = {
    MaskedLM: {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    },
    SequenceClassifier: {},
}
# HF buffers that carry no learned state.
HF_IGNORED = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")


def key_rules(model_type: type[nn.Module], num_layers: int) -> list[KeyRule]:
    """The full rule list for a model class and depth, layer templates expanded."""
    if model_type not in HEAD_RULES:
        raise ValueError(f"no Hugging Face mapping for {model_type.__name__}; expected MaskedLM or SequenceClassifier")
    layers = [
        KeyRule(r.ours.format(i=i), tuple(h.format(i=i) for h in r.hf)) for i in range(num_layers) for r in LAYER_RULES
    ]
    return [*BACKBONE_RULES, *layers, *HEAD_RULES[model_type]]


def _check_compatible(model: nn.Module) -> None:
    embeddings = model.backbone.embeddings
    if not isinstance(embeddings.positions, LearnedPositions):
        raise ValueError("Hugging Face BERT has learned absolute positions; this model uses another position type")
    if model.backbone.encoder.final_norm is not None:
        raise ValueError("Hugging Face BERT is post-norm; this model is pre-norm")
    if isinstance(model, SequenceClassifier) and model.head.pool is not cls_pool:
        raise ValueError("Hugging Face BERT pools the [CLS] token; this classifier uses another pooling")


def _layers(model: nn.Module) -> int:
    return len(model.backbone.encoder.layers)


def _unmapped(keys: set[str], covered: set[str], side: str) -> None:
    missing = sorted(keys - covered)
    if missing:
        raise ValueError(f"{side} keys neither mapped nor ignored by the key map: {missing}")


def to_hf_state_dict(model: MaskedLM | SequenceClassifier) -> dict[str, Tensor]:
    """Our state dict renamed (and QKV split) to the layout of the matching HF BERT class."""
    _check_compatible(model)
    ours = model.state_dict()
    rules = key_rules(type(model), _layers(model))
    _unmapped(set(ours), {r.ours for r in rules}, "minibert")
    out: dict[str, Tensor] = {}
    for rule in rules:
        for hf_key, part in zip(rule.hf, ours[rule.ours].chunk(len(rule.hf), dim=0)):
            out[hf_key] = part.clone()
    for alias, source in HF_ALIASES[type(model)].items():
        out[alias] = out[source].clone()
    return out


def load_hf_state_dict(model: MaskedLM | SequenceClassifier, hf: Mapping[str, Tensor]) -> None:
    """Fill ``model`` in place from an HF state dict; every HF key must be mapped or ignored."""
    _check_compatible(model)
    rules = key_rules(type(model), _layers(model))
    ignored = set(HF_IGNORED) | set(HF_ALIASES[type(model)])
    _unmapped(set(hf), {h for r in rules for h in r.hf} | ignored, "Hugging Face")
    missing = [h for r in rules for h in r.hf if h not in hf]
    if missing:
        raise ValueError(f"Hugging Face state dict lacks keys the model needs: {missing}")
    state = {r.ours: torch.cat([hf[h] for h in r.hf], dim=0) for r in rules}
    model.load_state_dict(state, strict=True)


def hf_bert_config(cfg: ModelConfig, head_cfg: ClassifierConfig | None = None, labels: tuple[str, ...] | None = None) -> Any:
    """The ``transformers.BertConfig`` equivalent of ``cfg`` (and a classifier head's config, its classes named by
    ``labels``: ``id2label`` / ``label2id``, as a model file's contract lists them)."""
    BertConfig = _transformers().BertConfig
    if cfg.position != "learned" or cfg.norm_style != "post":
        raise ValueError("Hugging Face BERT needs position='learned' and norm_style='post'")
    extra = {} if head_cfg is None else {"num_labels": head_cfg.num_labels, "classifier_dropout": head_cfg.dropout}
    if labels is not None:
        if head_cfg is None or len(labels) != head_cfg.num_labels:
            raise ValueError(f"labels {list(labels)} name {len(labels)} classes; the head has "
                             f"{None if head_cfg is None else head_cfg.num_labels} outputs")
        extra.update(id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)})
    return BertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act=cfg.activation,
        hidden_dropout_prob=cfg.hidden_dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        max_position_embeddings=cfg.max_positions,
        type_vocab_size=cfg.type_vocab_size,
        initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=cfg.pad_token_id,
        **extra,
    )


def model_config_from_hf(bert_config: Any) -> ModelConfig:
    """Our ``ModelConfig`` for a ``transformers.BertConfig``."""
    if getattr(bert_config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute learned positions convert to minibert")
    return ModelConfig(
        vocab_size=bert_config.vocab_size,
        hidden_size=bert_config.hidden_size,
        num_layers=bert_config.num_hidden_layers,
        num_heads=bert_config.num_attention_heads,
        intermediate_size=bert_config.intermediate_size,
        max_positions=bert_config.max_position_embeddings,
        type_vocab_size=bert_config.type_vocab_size,
        hidden_dropout=float(bert_config.hidden_dropout_prob),
        attention_dropout=float(bert_config.attention_probs_dropout_prob),
        layer_norm_eps=float(bert_config.layer_norm_eps),
        activation=bert_config.hidden_act,
        pad_token_id=bert_config.pad_token_id or 0,
        initializer_range=float(bert_config.initializer_range),
    )


def to_transformers(model: MaskedLM | SequenceClassifier, cfg: ModelConfig, labels: tuple[str, ...] | None = None) -> Any:
    """A ``BertForMaskedLM`` / ``BertForSequenceClassification`` holding our weights; a classifier's classes named by
    ``labels`` (its contract's) in ``config.id2label``."""
    tf = _transformers()
    if isinstance(model, MaskedLM):
        hf_model = tf.BertForMaskedLM(hf_bert_config(cfg))
    else:
        head = ClassifierConfig(num_labels=model.head.classifier.out_features, dropout=model.head.dropout.p)
        hf_model = tf.BertForSequenceClassification(hf_bert_config(cfg, head, labels))
    missing, unexpected = hf_model.load_state_dict(to_hf_state_dict(model), strict=False)
    missing = [k for k in missing if k not in HF_IGNORED]
    if missing or unexpected:
        raise ValueError(f"transformers did not take the converted weights: missing {missing}, unexpected {unexpected}")
    hf_model.tie_weights()
    return hf_model.eval()


def from_transformers(hf_model: Any) -> MaskedLM | SequenceClassifier:
    """Our model equivalent of a ``BertForMaskedLM`` or ``BertForSequenceClassification``."""
    cfg = model_config_from_hf(hf_model.config)
    name = type(hf_model).__name__
    if name == "BertForMaskedLM":
        model: MaskedLM | SequenceClassifier = build_mlm(cfg)
    elif name == "BertForSequenceClassification":
        dropout = hf_model.config.classifier_dropout
        head = ClassifierConfig(
            num_labels=hf_model.config.num_labels,
            dropout=float(cfg.hidden_dropout if dropout is None else dropout),
        )
        model = build_classifier(cfg, head)
    else:
        raise ValueError(f"cannot convert {name}; expected BertForMaskedLM or BertForSequenceClassification")
    load_hf_state_dict(model, hf_model.state_dict())
    return model.eval()


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("Hugging Face interop needs transformers: pip install 'minibert[test]'") from err
    return transformers
