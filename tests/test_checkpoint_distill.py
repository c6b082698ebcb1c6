"""Checkpoints round-trip with their configs; students start from spaced teacher layers."""

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, build_classifier, build_mlm
from minibert.checkpoint import load_model, read_metadata, save_model
from minibert.distill import init_student_from_teacher, spaced_layers
from pipeline.metrics import classification_metrics, percentiles_ms

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
    narrow = build_classifier(ModelConfig.preset("tiny", vocab_size=V, hidden_size=64, intermediate_size=128, num_layers=1), head)
    assert init_student_from_teacher(narrow, teacher) == []


def test_classification_metrics_match_scikit_learn() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    labels, logits = rng.integers(0, 2, 300), rng.normal(size=(300, 2))
    ours = classification_metrics(labels, logits)
    predictions = logits.argmax(1)
    assert ours["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(labels, predictions))
    assert ours["f1"] == pytest.approx(sklearn_metrics.f1_score(labels, predictions))
    assert percentiles_ms([0.001, 0.002, 0.003]) == pytest.approx({"p50_ms": 2.0, "p95_ms": 2.9})
