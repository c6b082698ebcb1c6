"""The word-level CNN (minibert.textcnn): masking, initialisation from word vectors, what its
widths can learn, and its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from minibert.files import ArtifactError
from minibert.textcnn import TextCNNConfig, build_textcnn, load_textcnn, save_textcnn
from minibert.validation import ConfigError


def test_padding_changes_no_logit() -> None:
    torch.manual_seed(0)
    model = build_textcnn(TextCNNConfig(vocab_size=50, dim=16, widths=(1, 2, 3), filters=4)).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    padded = torch.tensor([[5, 6, 7, 8, 0, 0, 0]])
    mask = (padded != 0).long()
    torch.testing.assert_close(model(ids, torch.ones_like(ids)), model(padded, mask))
    torch.testing.assert_close(model(padded), model(padded, mask))  # the mask defaults to the non-pad ids
    # a real token where the padding was does change them: the mask is what hides it
    assert not torch.allclose(model(ids), model(torch.tensor([[5, 6, 7, 8, 9]])))


def test_word_vectors_initialise_the_embedding_at_unit_scale() -> None:
    vectors = torch.randn(30, 8) * 0.02
    model = build_textcnn(TextCNNConfig(vocab_size=30, dim=8), vectors)
    torch.testing.assert_close(model.embedding.weight.detach(), vectors)
    scaled = model.embedding.weight.detach() * model.input_scale
    assert scaled.std().item() == pytest.approx(1.0, rel=1e-4)
    with pytest.raises(ConfigError, match=r"\(30, 8\) do not fit vocab_size 40"):
        build_textcnn(TextCNNConfig(vocab_size=40, dim=8), vectors)


@pytest.mark.parametrize("changes, match", [
    ({"widths": ()}, "widths"), ({"widths": (0, 2)}, "widths"), ({"dropout": 1.0}, "dropout"),
    ({"filters": 0}, "filters"), ({"num_labels": 1}, "num_labels"),
])
def test_bad_configs_name_their_field(changes: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TextCNNConfig(**{"vocab_size": 10, "dim": 4, **changes})


def order_task(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences holding the tokens 3 and 4 once each among filler tokens 5-19; the label is
    whether 3 comes right before 4. Unigram counts are equal in both classes: only a width >= 2
    can tell them apart."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 20, (n, 10), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    pos = torch.randint(0, 9, (n,), generator=g)
    for i in range(n):
        first, second = (3, 4) if labels[i] else (4, 3)
        ids[i, pos[i]], ids[i, pos[i] + 1] = first, second
    return ids, labels


def order_task_accuracy(cfg: TextCNNConfig, lr: float, steps: int = 150) -> float:
    """A word-CNN of ``cfg`` (seed 0) trained full-batch with Adam on 512 order-task rows, then its
    accuracy on 512 fresh ones."""
    torch.manual_seed(0)
    model = build_textcnn(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    ids, labels = order_task(512, seed=0)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(ids), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    test_ids, test_labels = order_task(512, seed=1)
    return (model.eval()(test_ids).argmax(-1) == test_labels).float().mean().item()


@pytest.mark.parametrize("widths, learns", [((1,), False), ((2,), True)])
def test_only_bigram_filters_learn_word_order(widths: tuple[int, ...], learns: bool) -> None:
    accuracy = order_task_accuracy(TextCNNConfig(vocab_size=20, dim=8, widths=widths, filters=8, dropout=0.0), lr=0.02)
    assert (accuracy > 0.95) if learns else (accuracy < 0.65), accuracy


def test_a_checkpoint_round_trips_and_refuses_foreign_files(tmp_path: Path) -> None:
    cfg = TextCNNConfig(vocab_size=25, dim=6, widths=(2, 3), filters=5)
    model = build_textcnn(cfg, torch.randn(25, 6)).eval()
    path = save_textcnn(model, cfg, tmp_path / "cnn" / "model.safetensors", vocabulary="abc")
    loaded, loaded_cfg = load_textcnn(path)
    assert loaded_cfg == cfg and not loaded.training
    ids = torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]])
    torch.testing.assert_close(loaded(ids), model(ids))
    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ArtifactError, match="not a word-CNN checkpoint"):
        load_textcnn(tmp_path / "other.safetensors")
    (tmp_path / "broken.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(ArtifactError, match="rerun `dvc repro cnn`"):
        load_textcnn(tmp_path / "broken.safetensors")
    with pytest.raises(FileNotFoundError, match="dvc repro cnn"):
        load_textcnn(tmp_path / "missing.safetensors")


def test_a_distilled_word_cnn_loads_as_a_classifier_and_checks_its_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from minibert import ModelConfig, build_mlm
    from minibert.checkpoint import check_tokenizer, load_model, save_model
    from minibert.classifiers import load_classifier
    from minibert.tokenizer import vocabulary_digest

    tok = Tokenizer(WordLevel({f"w{i}": i for i in range(30)}, unk_token="w1"))
    cfg = TextCNNConfig(vocab_size=30, dim=8, widths=(1, 2), filters=3)
    model = build_textcnn(cfg).eval()
    path = save_textcnn(model, cfg, tmp_path / "student.safetensors", vocabulary_digest(tok))
    loaded = load_classifier(path)
    ids = torch.tensor([[3, 4, 5, 0]])
    torch.testing.assert_close(loaded(ids, (ids != 0).long()), model(ids, (ids != 0).long()), atol=0, rtol=0)
    assert not loaded.training
    check_tokenizer(path, tok, "tok.json")  # the tokenizer it was saved with passes
    other = Tokenizer(WordLevel({f"v{i}": i for i in range(30)}, unk_token="v1"))
    with pytest.raises(ArtifactError, match="is not the tokenizer"):
        check_tokenizer(path, other, "other.json")
    with pytest.raises(ArtifactError, match="holds a textcnn model, not a minibert encoder"):
        load_model(path)
    mlm_cfg = ModelConfig.preset("tiny", vocab_size=30)
    mlm = save_model(build_mlm(mlm_cfg), mlm_cfg, tmp_path / "mlm.safetensors")
    with pytest.raises(ArtifactError, match="holds a mlm model, not a sentence classifier"):
        load_classifier(mlm)


def test_the_logit_distiller_trains_a_word_cnn_toward_its_soft_targets() -> None:
    from minibert.distill import LogitDistiller
    from minibert.losses import kd_loss
    from minibert.model import parameter_counts

    torch.manual_seed(0)
    cfg = TextCNNConfig(vocab_size=20, dim=8, widths=(1, 2), filters=4, dropout=0.0)
    student = build_textcnn(cfg)
    distiller = LogitDistiller(student)
    assert parameter_counts(student) == (sum(p.numel() for p in student.parameters()),
                                         sum(p.numel() for p in student.parameters()) - 20 * 8)
    ids, labels = order_task(64, seed=3)
    mask = torch.ones_like(ids)
    targets = torch.randn(64, 2) * 3  # soft targets that disagree with the labels on some rows
    torch.testing.assert_close(distiller(ids, mask), student(ids, mask))
    before = distiller.loss(ids, mask, labels, targets, 2.0, 1.0)
    torch.testing.assert_close(before, kd_loss(student(ids, mask), targets, labels, 2.0, 1.0))
    opt = torch.optim.Adam(distiller.parameters(), lr=1e-2)
    for _ in range(100):
        opt.zero_grad()
        distiller.loss(ids, mask, labels, targets, 2.0, 1.0).backward()
        opt.step()
    after = distiller.loss(ids, mask, labels, targets, 2.0, 1.0)
    assert after.item() < 0.5 * before.item()
    agree = (student(ids, mask).argmax(1) == targets.argmax(1)).float().mean().item()
    assert agree > 0.9, "alpha 1: the student follows the soft targets, not the labels"


@pytest.mark.parametrize("vectors, trained, frozen", [
    ("non_static", ["embedding"], []), ("static", [], ["embedding"]), ("multichannel", ["embedding"], ["static"]),
])
def test_kims_vector_channels_train_only_the_tables_they_should(tmp_path: Path, vectors: str, trained: list[str],
                                                                 frozen: list[str]) -> None:
    """Through the cnn stage's loop (``cnn_loop``: AdamW with weight decay, best-on-validation reload): a
    frozen table keeps the pretrained vectors bit for bit and stays frozen in the returned and reloaded
    model; a trained one moves. The stage's own word-CNN (``train_word_cnn``) is the non_static one."""
    from minibert.trainer import NullTracker
    from pipeline.classifier_loop import train_classifier
    from pipeline.params import CNNParams, TrainParams
    from pipeline.scoring import Validation
    from pipeline.word_cnn import cnn_loop, train_word_cnn

    pretrained = torch.randn(20, 8) * 0.02
    ids, labels = order_task(256, seed=0)
    val_ids, val_labels = order_task(64, seed=1)
    val = Validation(lambda m: m.eval()(val_ids).detach().numpy(), val_labels.numpy())
    cfg = CNNParams(widths=(1, 2), filters=8, dropout=0.0, batch_size=32, epochs=2.0, time_budget_min=None)
    shared, rows = TrainParams(eval_every=8), (ids.tolist(), labels.numpy())
    if vectors == "non_static":  # the cnn stage's word-CNN
        model, model_cfg, metrics = train_word_cnn(cfg, shared, pretrained, rows, val, NullTracker(), 2)
    else:  # Kim's other channels: a minibert.textcnn setting, trained through the same loop
        torch.manual_seed(shared.seed)
        model_cfg = TextCNNConfig(vocab_size=20, dim=8, widths=cfg.widths, filters=cfg.filters, dropout=cfg.dropout,
                                  vectors=vectors)
        model, metrics = train_classifier(build_textcnn(model_cfg, pretrained), cnn_loop(cfg, shared), rows, val,
                                          NullTracker(), name="cnn")
    assert model_cfg.vectors == vectors and metrics["val_accuracy"] > 0.5
    tables = {"embedding": model.embedding, "static": model.static}
    assert (model.static is not None) == (vectors == "multichannel")
    assert model.convs[0].in_channels == 8 * (2 if vectors == "multichannel" else 1)
    for name in trained:
        assert not torch.equal(tables[name].weight.detach(), pretrained) and tables[name].weight.requires_grad
    for name in frozen:
        torch.testing.assert_close(tables[name].weight.detach(), pretrained, rtol=0, atol=0)
        assert not tables[name].weight.requires_grad
    loaded, _ = load_textcnn(save_textcnn(model, model_cfg, tmp_path / "cnn.safetensors"))
    assert sorted(n.split(".")[0] for n, p in loaded.named_parameters() if not p.requires_grad) == frozen
    torch.testing.assert_close(loaded(val_ids), model.eval()(val_ids))


def test_an_unknown_vector_channel_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"vectors: 'dynamic' is not one of \['non_static', 'static', 'multichannel'\]"):
        TextCNNConfig(vocab_size=10, dim=4, vectors="dynamic")
