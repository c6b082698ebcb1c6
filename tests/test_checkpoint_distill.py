"""Checkpoints round-trip with their configs; students start from spaced teacher layers."""

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, build_classifier, build_mlm
from minibert.checkpoint import load_model, read_metadata, save_model
from minibert.distill import (
    Distiller,
    forward_with_internals,
    init_student_from_teacher,
    principal_basis,
    spaced_layers,
)
from minibert.losses import attention_kl, hidden_mse, kd_loss
from pipeline.metrics import classification_metrics, per_class, percentiles_ms

V = 200


def test_classifier_checkpoint_round_trip(tmp_path: Path) -> None:
    cfg = ModelConfig.preset("tiny", vocab_size=V, position="rotary")
    head = ClassifierConfig(num_labels=3, pooling="max")
    model = build_classifier(cfg, head).eval()
    path = save_model(model, cfg, tmp_path / "m" / "model.safetensors", head)
    loaded, cfg2, head2 = load_model(path)
    assert (cfg2, head2) == (cfg, head)
    ids, mask = padded_batch(V, [7, 3])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), model(ids, mask), atol=0, rtol=0)
    assert [p.name for p in path.parent.iterdir()] == ["model.safetensors"]


def test_mlm_checkpoint_stores_the_tied_matrix_once(tmp_path: Path) -> None:
    cfg = ModelConfig.preset("tiny", vocab_size=V)
    path = save_model(build_mlm(cfg), cfg, tmp_path / "mlm.safetensors")
    kind, cfg2, head = read_metadata(path)
    assert (kind, cfg2, head) == ("mlm", cfg, None)


def test_checkpoint_errors(tmp_path: Path) -> None:
    cfg = ModelConfig.preset("tiny", vocab_size=V)
    with pytest.raises(ValueError, match="needs its ClassifierConfig"):
        save_model(build_classifier(cfg, ClassifierConfig()), cfg, tmp_path / "c.safetensors")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_model(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.safetensors is not a readable safetensors checkpoint"):
        load_model(junk)


@pytest.mark.parametrize("teacher, student, expected", [(4, 2, [1, 3]), (12, 6, [1, 3, 5, 7, 9, 11]), (4, 4, [0, 1, 2, 3]), (3, 1, [2])])
def test_spaced_layers(teacher: int, student: int, expected: list[int]) -> None:
    assert spaced_layers(teacher, student) == expected


def test_student_starts_from_teacher_layers() -> None:
    head = ClassifierConfig()
    teacher = build_classifier(ModelConfig.preset("tiny", vocab_size=V, num_layers=4), head)
    student = build_classifier(ModelConfig.preset("tiny", vocab_size=V, num_layers=2), head)
    copied = init_student_from_teacher(student, teacher)
    assert len(copied) == len(student.state_dict())
    torch.testing.assert_close(student.backbone.encoder.layers[0].attention.qkv.weight,
                               teacher.backbone.encoder.layers[1].attention.qkv.weight)
    torch.testing.assert_close(student.backbone.encoder.layers[1].feed_forward.up.weight,
                               teacher.backbone.encoder.layers[3].feed_forward.up.weight)
    wide = build_classifier(ModelConfig.preset("tiny", vocab_size=V, hidden_size=256, intermediate_size=128, num_layers=1), head)
    assert init_student_from_teacher(wide, teacher) == []


def test_a_narrower_student_starts_from_projected_teacher_embeddings() -> None:
    head = ClassifierConfig()
    teacher = build_classifier(ModelConfig.preset("tiny", vocab_size=V, num_layers=2), head)
    student = build_classifier(ModelConfig.preset("tiny", vocab_size=V, hidden_size=64, intermediate_size=128, num_layers=1), head)
    copied = init_student_from_teacher(student, teacher)
    assert sorted(copied) == ["backbone.embeddings.positions.table.weight", "backbone.embeddings.segments.weight",
                              "backbone.embeddings.tokens.weight"]
    t_tokens = teacher.backbone.embeddings.tokens.weight.detach()
    basis = principal_basis(t_tokens, 64)
    torch.testing.assert_close(basis.T @ basis, torch.eye(64), atol=1e-5, rtol=0)  # orthonormal columns
    for name in copied:
        torch.testing.assert_close(student.state_dict()[name], teacher.state_dict()[name] @ basis)
    # The top directions keep more of the embeddings' spread than any other 64 would: more than
    # 64/128 of the centred variance.
    centred = t_tokens - t_tokens.mean(0)
    assert (centred @ basis).square().sum() > 0.5 * centred.square().sum()


def test_intermediate_losses_are_zero_at_a_match_and_ignore_padding() -> None:
    torch.manual_seed(0)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    hidden = torch.randn(2, 4, 8)
    assert hidden_mse(hidden, hidden, mask) == 0
    other = hidden.clone()
    other[~mask] += 5.0  # padding only
    assert hidden_mse(other, hidden, mask) == 0
    other[0, 0] += 1.0
    assert hidden_mse(other, hidden, mask) == pytest.approx(1.0 / 5)  # one real token, mean over its 8 dims
    teacher = torch.softmax(torch.randn(2, 4, 4, 4), dim=-1)
    student = torch.softmax(torch.randn(2, 2, 4, 4), dim=-1)  # different head count
    assert attention_kl(teacher, teacher, mask) == pytest.approx(0.0, abs=1e-6)
    assert attention_kl(student, teacher, mask) > 0


def test_distiller_trains_the_student_and_its_projections_only() -> None:
    head = ClassifierConfig()
    teacher = build_classifier(ModelConfig.preset("tiny", vocab_size=V, num_layers=2), head).eval()
    student = build_classifier(ModelConfig.preset("tiny", vocab_size=V, hidden_size=64, intermediate_size=128, num_layers=1), head)
    ids, mask = padded_batch(V, [9, 5])
    labels, teacher_logits = torch.tensor([0, 1]), torch.randn(2, 2)
    plain = Distiller(student, teacher)
    assert not list(plain.projections) and not any(k.startswith("_teacher") for k in plain.state_dict())
    torch.manual_seed(0)
    student.eval()
    torch.testing.assert_close(plain.loss(ids, mask, labels, teacher_logits, 2.0, 0.5),
                               kd_loss(student(ids, mask), teacher_logits, labels, 2.0, 0.5))
    full = Distiller(student, teacher, hidden_weight=1.0, attention_weight=1.0)
    assert len(full.projections) == 1 and full.projections[0].weight.shape == (128, 64)
    assert {id(p) for p in full.parameters()}.isdisjoint(id(p) for p in teacher.parameters())
    loss = full.loss(ids, mask, labels, teacher_logits, 2.0, 0.5)
    assert loss > plain.loss(ids, mask, labels, teacher_logits, 2.0, 0.5)  # the intermediate terms add on
    loss.backward()
    assert full.projections[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in teacher.parameters())


def test_layer_outputs_collect_every_layer() -> None:
    model = build_classifier(ModelConfig.preset("tiny", vocab_size=V, num_layers=3), ClassifierConfig()).eval()
    ids, mask = padded_batch(V, [6, 4])
    with torch.no_grad():
        logits, hidden_states, weights = forward_with_internals(model, ids, mask, need_weights=True)
        final, _ = model.backbone(ids, mask)
        torch.testing.assert_close(logits, model(ids, mask))
    assert len(hidden_states) == 3 and len(weights) == 3 and weights[0].shape == (2, 2, 6, 6)
    torch.testing.assert_close(hidden_states[-1], final)  # post-norm: the last layer's output is the final state
    model.train()  # attention dropout on: the returned probabilities are still distributions
    _, _, train_weights = forward_with_internals(model, ids, mask, need_weights=True)
    torch.testing.assert_close(train_weights[0].sum(-1), torch.ones(2, 2, 6))
    assert attention_kl(train_weights[0], train_weights[0], mask.bool()).item() == pytest.approx(0.0, abs=1e-6)


def test_classification_metrics_match_scikit_learn() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for classes in (2, 6):
        labels, logits = rng.integers(0, classes, 300), rng.normal(size=(300, classes))
        ours = classification_metrics(labels, logits)
        predictions = logits.argmax(1)
        assert ours["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(labels, predictions))
        assert ours["macro_f1"] == pytest.approx(sklearn_metrics.f1_score(labels, predictions, average="macro"))
        report = sklearn_metrics.precision_recall_fscore_support(labels, predictions, zero_division=0)
        for i, row in enumerate(per_class(labels, predictions, classes).values()):
            assert (row["precision"], row["recall"], row["f1"], row["support"]) == pytest.approx(tuple(r[i] for r in report))
    assert percentiles_ms([0.001, 0.002, 0.003]) == pytest.approx({"p50_ms": 2.0, "p95_ms": 2.9})
