"""Choices that hold across datasets: temperature scaling finds the temperature that generated the labels, keeps
every argmax and lowers the NLL and ECE; balanced class weights follow scikit-learn's rule and weigh the losses as
documented; a small dataset's loop is scored at least twice an epoch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.utils.class_weight import compute_class_weight

from minibert.calibration import fit_temperature, nll
from minibert.losses import kd_loss
from pipeline.classifier_loop import class_weight, classify_step
from pipeline.metrics import reliability


def sampled(temperature: float, rows: int = 20000, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels drawn from softmax(logits / temperature): the temperature that calibrates them."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 3.0, size=(rows, classes))
    p = np.exp(logits / temperature)
    p /= p.sum(axis=1, keepdims=True)
    labels = np.array([rng.choice(classes, p=row) for row in p])
    return logits, labels


@pytest.mark.parametrize("true", [0.5, 2.5])
def test_the_fitted_temperature_is_the_one_that_made_the_labels(true: float) -> None:
    logits, labels = sampled(true)
    fitted = fit_temperature(logits, labels)
    assert fitted == pytest.approx(true, rel=0.06)
    assert nll(logits, labels, fitted) < nll(logits, labels) - 0.01
    before = reliability(labels, np.exp(logits) / np.exp(logits).sum(1, keepdims=True), 10)[1]
    scaled = np.exp(logits / fitted) / np.exp(logits / fitted).sum(1, keepdims=True)
    after = reliability(labels, scaled, 10)[1]
    assert after < before / 2 and after < 0.02
    assert (scaled.argmax(1) == logits.argmax(1)).all(), "a temperature never changes the answer"


def test_no_rows_leave_the_logits_as_they_are() -> None:
    assert fit_temperature(np.zeros((0, 3)), np.zeros(0, dtype=np.int64)) == 1.0


def test_balanced_class_weights_are_scikit_learns_and_weigh_the_losses() -> None:
    labels = np.array([0] * 8 + [1] * 2 + [2] * 30)
    weights = class_weight("balanced", labels, 3)
    np.testing.assert_allclose(weights.numpy(), compute_class_weight("balanced", classes=np.arange(3), y=labels), rtol=1e-6)
    assert class_weight("none", labels, 3) is None
    assert class_weight("balanced", np.array([0, 0, 1]), 3)[2] == 1.0, "a class with no row weighs 1"
    torch.manual_seed(0)
    logits, targets = torch.randn(6, 3), torch.tensor([0, 1, 2, 2, 2, 0])

    class Fixed(torch.nn.Module):
        def forward(self, ids, mask):  # noqa: ANN001, ANN201
            return logits

    loss, _ = classify_step(Fixed(), (torch.zeros(6, 2), torch.ones(6, 2), targets), weights)
    per_row = F.cross_entropy(logits, targets, reduction="none")
    w = weights[targets]
    assert loss.item() == pytest.approx(((per_row * w).sum() / w.sum()).item(), rel=1e-6)
    assert loss.item() != pytest.approx(per_row.mean().item(), rel=1e-3)
    teacher = torch.randn(6, 3)
    hard_only = kd_loss(logits, teacher, targets, temperature=2.0, alpha=0.0, weight=weights)
    assert hard_only.item() == pytest.approx(loss.item(), rel=1e-6)


def test_a_small_datasets_loop_is_scored_at_least_twice_an_epoch() -> None:
    from minibert.train_config import OptimConfig
    from pipeline.classifier_loop import ClassifierLoop, eval_interval

    loop = ClassifierLoop(section="cnn", seed=0, batch_size=64, epochs=12.0, time_budget_min=None,
                          optim=OptimConfig(lr=1e-3), log_every=25, eval_every=500)
    assert eval_interval(loop, 5073) == 40, "TREC's 80 steps an epoch: every 40"
    assert eval_interval(loop, 100_000) == 500, "a large dataset keeps train.eval_every"
    assert eval_interval(loop, 10) == 1
