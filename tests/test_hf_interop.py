"""Whole-model parity with transformers' BERT (random init, no download), weights converted both ways."""

import pytest
import torch
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, build_classifier, build_mlm
from minibert.hf_interop import (
    from_transformers,
    hf_bert_config,
    load_hf_state_dict,
    to_hf_state_dict,
    to_transformers,
)

transformers = pytest.importorskip("transformers")

V = 500
TOL = dict(atol=1e-5, rtol=1e-5)


def tiny_cfg() -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=V, max_positions=64)


def perturb(module: torch.nn.Module) -> None:
    """Make every parameter non-trivial (norms off 1, biases off 0) so no mapping mistake hides."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.05)


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids, mask = padded_batch(V, [12, 7, 3])
    segments = torch.zeros_like(ids)
    segments[0, 6:12] = 1
    return ids, mask, segments


def assert_same_where_real(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> None:
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], **TOL)


def test_hf_masked_lm_to_ours() -> None:
    hf = transformers.BertForMaskedLM(hf_bert_config(tiny_cfg())).eval()
    perturb(hf)
    ours = from_transformers(hf)
    ids, mask, segments = inputs()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits
        got = ours(ids, mask, segments)
    assert_same_where_real(got, expected, mask)


def test_ours_masked_lm_to_hf() -> None:
    cfg = tiny_cfg()
    ours = build_mlm(cfg).eval()
    perturb(ours)
    hf = to_transformers(ours, cfg)
    assert hf.cls.predictions.decoder.weight.data_ptr() == hf.bert.embeddings.word_embeddings.weight.data_ptr()
    ids, mask, segments = inputs()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits
        got = ours(ids, mask, segments)
    assert_same_where_real(got, expected, mask)


@pytest.mark.parametrize("direction", ["hf-to-ours", "ours-to-hf"])
def test_sequence_classifier_parity(direction: str) -> None:
    cfg = tiny_cfg()
    if direction == "hf-to-ours":
        hf = transformers.BertForSequenceClassification(hf_bert_config(cfg, ClassifierConfig(num_labels=3))).eval()
        perturb(hf)
        ours = from_transformers(hf)
    else:
        ours = build_classifier(cfg, ClassifierConfig(num_labels=3)).eval()
        perturb(ours)
        hf = to_transformers(ours, cfg)
    ids, mask, segments = inputs()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits
        got = ours(ids, mask, segments)
    assert got.shape == (3, 3)
    torch.testing.assert_close(got, expected, **TOL)


def test_a_classifier_exports_its_class_names_as_id2label() -> None:
    cfg = tiny_cfg()
    names = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    hf = to_transformers(build_classifier(cfg, ClassifierConfig(num_labels=6)).eval(), cfg, labels=names)
    assert hf.config.id2label == dict(enumerate(names)) and hf.config.label2id["LOC"] == 4
    with pytest.raises(ValueError, match=r"name 2 classes; the head has 6 outputs"):
        to_transformers(build_classifier(cfg, ClassifierConfig(num_labels=6)).eval(), cfg, labels=("a", "b"))


def test_round_trip_is_exact() -> None:
    cfg = tiny_cfg()
    model = build_mlm(cfg)
    perturb(model)
    copy = build_mlm(cfg)
    load_hf_state_dict(copy, to_hf_state_dict(model))
    for key, value in model.state_dict().items():
        torch.testing.assert_close(copy.state_dict()[key], value, atol=0, rtol=0)


def test_unmapped_hf_key_is_refused_by_name() -> None:
    cfg = tiny_cfg()
    state = to_hf_state_dict(build_mlm(cfg))
    state["bert.encoder.layer.0.attention.self.relative_bias"] = torch.zeros(3)
    with pytest.raises(ValueError, match="relative_bias"):
        load_hf_state_dict(build_mlm(cfg), state)


def test_missing_hf_key_is_refused_by_name() -> None:
    cfg = tiny_cfg()
    state = to_hf_state_dict(build_mlm(cfg))
    del state["bert.encoder.layer.1.output.dense.bias"]
    with pytest.raises(ValueError, match=r"layer\.1\.output\.dense\.bias"):
        load_hf_state_dict(build_mlm(cfg), state)


@pytest.mark.parametrize(
    "overrides, message",
    [({"position": "rotary"}, "learned absolute positions"), ({"norm_style": "pre"}, "post-norm")],
)
def test_incompatible_models_are_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_hf_state_dict(build_mlm(ModelConfig.preset("tiny", vocab_size=V, **overrides)))


def test_mean_pooled_classifier_is_refused() -> None:
    with pytest.raises(ValueError, match="pools the \\[CLS\\] token"):
        to_hf_state_dict(build_classifier(tiny_cfg(), ClassifierConfig(pooling="mean")))
