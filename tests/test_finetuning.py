"""LLRD multipliers, gradual unfreezing order, FGM and PGD: what each changes, and what it leaves alone."""

import pytest
import torch
import torch.nn.functional as F
from conftest import padded_batch

from minibert import ClassifierConfig, ModelConfig, build_classifier
from minibert.finetuning import ADVERSARIES, EMBEDDING, FGM, PGD, GradualUnfreezing, llrd_scale

V = 120


def classifier(layers: int = 3):
    return build_classifier(ModelConfig.preset("tiny", vocab_size=V, num_layers=layers, hidden_dropout=0.0,
                                               attention_dropout=0.0), ClassifierConfig(dropout=0.0))


def step(model, batch):
    ids, mask, labels = batch
    return F.cross_entropy(model(ids, mask), labels), int(mask.sum())


def batch():
    ids, mask = padded_batch(V, [6, 4, 5])
    return ids, mask, torch.tensor([0, 1, 1])


def test_llrd_multipliers_fall_with_depth() -> None:
    scale = llrd_scale(num_layers=3, decay=0.5)
    assert scale("head.classifier.weight") == 1.0
    assert scale("backbone.encoder.layers.2.attention.qkv.weight") == 1.0
    assert scale("backbone.encoder.layers.1.feed_forward.up.bias") == 0.5
    assert scale("backbone.encoder.layers.0.attention_norm.weight") == 0.25
    assert scale(EMBEDDING) == 0.125
    with pytest.raises(ValueError, match="decay must be in"):
        llrd_scale(3, 0.0)


def test_gradual_unfreezing_thaws_top_down() -> None:
    model = classifier(layers=3)
    unfreeze = GradualUnfreezing(model, interval=10)
    unfreeze(0)
    assert all(p.requires_grad for p in model.head.parameters())
    assert not any(p.requires_grad for p in model.backbone.parameters())
    unfreeze(10)
    layers = model.backbone.encoder.layers
    assert all(p.requires_grad for p in layers[2].parameters()) and not any(p.requires_grad for p in layers[1].parameters())
    unfreeze(35)
    assert unfreeze.thawed_groups() == 3 and not model.backbone.embeddings.tokens.weight.requires_grad
    unfreeze(40)
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("adversary", [FGM(1.0), PGD(1.0, 0.4, 3)], ids=["fgm", "pgd"])
def test_adversary_adds_gradients_and_restores_the_embeddings(adversary) -> None:
    model = classifier()
    b = batch()
    loss, _ = step(model, b)
    loss.backward()
    clean = {n: p.grad.clone() for n, p in model.named_parameters()}
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    adversary.attack(model, b, step, scale=1.0)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, weights[name], atol=0, rtol=0)  # weights restored exactly
    changed = [n for n, p in model.named_parameters() if not torch.allclose(p.grad, clean[n])]
    assert "head.classifier.weight" in changed, "the adversarial loss adds gradients"


def test_fgm_adds_exactly_the_perturbed_loss_gradient() -> None:
    model = classifier()
    b = batch()
    step(model, b)[0].backward()
    emb = dict(model.named_parameters())[EMBEDDING]
    delta = 0.5 * emb.grad / emb.grad.norm()
    clean_head = model.head.classifier.weight.grad.clone()
    reference = classifier()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        dict(reference.named_parameters())[EMBEDDING].add_(delta)
    step(reference, b)[0].backward()
    FGM(0.5).attack(model, b, step, scale=1.0)
    torch.testing.assert_close(model.head.classifier.weight.grad, clean_head + reference.head.classifier.weight.grad)


def test_pgd_perturbation_stays_in_the_epsilon_ball() -> None:
    model = classifier()
    b = batch()
    step(model, b)[0].backward()
    seen = []
    emb = dict(model.named_parameters())[EMBEDDING]
    original = emb.detach().clone()

    def spy(m, bt):
        seen.append(torch.linalg.vector_norm(dict(m.named_parameters())[EMBEDDING].detach() - original).item())
        return step(m, bt)

    PGD(epsilon=0.3, alpha=0.2, steps=4).attack(model, b, spy, scale=1.0)
    assert len(seen) == 4 and max(seen) <= 0.3 + 1e-5 and seen[0] == pytest.approx(0.2, rel=1e-4)


def test_adversary_registry() -> None:
    assert ADVERSARIES["none"](1.0, 0.3, 3) is None
    assert isinstance(ADVERSARIES["fgm"](1.0, 0.3, 3), FGM) and isinstance(ADVERSARIES["pgd"](1.0, 0.3, 3), PGD)


def test_the_finetune_stage_is_seeded_and_trains_a_head_of_the_tasks_classes(tmp_path) -> None:
    """``pipeline.stages.finetune.run`` from the same encoder and seed gives the same teacher (its head's initialisation
    is drawn after the seed, whatever loading the encoder drew); another seed another one."""
    import copy
    import dataclasses

    import numpy as np
    import pandas as pd
    from conftest import toy_texts, toy_tokenizer

    from minibert import build_mlm
    from minibert.trainer import RecordingTracker
    from pipeline.params import Params
    from pipeline.stages.finetune import run

    tok, _ = toy_tokenizer(tmp_path)
    shape = ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64)
    torch.manual_seed(3)
    encoder = build_mlm(shape).backbone
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"text": toy_texts(rng, [8] * 48), "label": rng.integers(0, 3, 48)})
    val = pd.DataFrame({"text": toy_texts(rng, [8] * 12), "label": rng.integers(0, 3, 12)})
    base = Params()
    params = dataclasses.replace(
        base, train=dataclasses.replace(base.train, precision="fp32", eval_every=3),
        finetune=dataclasses.replace(base.finetune, batch_size=8, time_budget_min=None))

    def teacher(seed: int, drawn: int):
        seeded = dataclasses.replace(params, train=dataclasses.replace(params.train, seed=seed))
        torch.manual_seed(drawn)  # whatever the caller's generator holds: the stage seeds itself
        return run(seeded, tok, copy.deepcopy(encoder), shape, 3, train, val, [], RecordingTracker())

    (first, metrics), (again, _), (other, _) = teacher(0, drawn=1), teacher(0, drawn=2), teacher(1, drawn=1)
    assert first.head.classifier.out_features == 3 and metrics["processes"] == 1
    for (name, a), b in zip(first.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert not torch.equal(first.head.classifier.weight, other.head.classifier.weight)
