"""Soft targets: the cached logit files (written atomically, read back only while they match the split in
use), the sources' mix at their shares, TF-IDF's out-of-fold scores and their per-text alignment, and the
one folder the student reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from minibert.runtime import softmax
from minibert.validation import ConfigError
from pipeline.distillation import with_transfer
from pipeline.io import DataError
from pipeline.params import BaselineParams, SharesParams
from pipeline.soft_targets import (
    SoftTargets,
    combine,
    load_logits,
    load_soft_targets,
    log_probabilities,
    mix_ensemble,
    mix_soft_targets,
    not_a_source,
    save_logits,
    save_soft_targets,
    shares_on_validation,
)
from pipeline.tfidf import FOLDS, build_baseline, out_of_fold, out_of_fold_logits

UNIQUE_WORDS = BaselineParams(min_df=1)  # every row's own word survives the vocabulary cut


def test_round_trip_and_stale_or_broken_files_are_refused(tmp_path: Path) -> None:
    labels = np.array([0, 1, 1, 0])
    logits = np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32)
    path = tmp_path / "cache" / "train.npz"
    save_logits(path, logits, labels)
    assert [p.name for p in path.parent.iterdir()] == ["train.npz"], "no temporary left behind"
    np.testing.assert_array_equal(load_logits(path, labels), logits)
    with pytest.raises(DataError, match=r"4 rows do not match the 5 training rows.*dvc repro teacher_logits"):
        load_logits(path, np.array([0, 1, 1, 0, 1]))
    with pytest.raises(DataError, match="do not match"):
        load_logits(path, np.array([1, 1, 1, 0]))  # same count, other rows
    whole = path.read_bytes()
    for damaged in (b"not numpy", whole[: len(whole) // 2]):  # garbage; a zip cut in half (BadZipFile)
        path.write_bytes(damaged)
        with pytest.raises(DataError, match=r"train\.npz: not a teacher_logits file .*rerun `dvc repro teacher_logits`"):
            load_logits(path, labels)
    with pytest.raises(FileNotFoundError, match="dvc repro teacher_logits"):
        load_logits(tmp_path / "absent.npz", labels)
    with pytest.raises(FileNotFoundError, match="dvc repro baseline_oof"):  # the fix names the stage that writes it
        load_logits(tmp_path / "absent.npz", labels, stage="baseline_oof")


def test_a_source_at_share_0_writes_files_with_no_columns_that_still_name_their_rows(tmp_path: Path) -> None:
    """cnn and teacher_logits at share 0 score nothing: both their files hold (rows, 0) logits with the rows' labels,
    so a later stage still refuses them once the split changes, and the mix leaves them out."""
    labels, transfer_labels = np.array([0, 1, 1]), np.full(4, -1)
    metrics = not_a_source(tmp_path / "train.npz", tmp_path / "transfer.npz", labels, transfer_labels)
    assert metrics == {"rows": 3, "transfer_rows": 4, "skipped": True}
    assert load_logits(tmp_path / "train.npz", labels, "cnn").shape == (3, 0)
    assert load_logits(tmp_path / "transfer.npz", transfer_labels, "cnn").shape == (4, 0)
    with pytest.raises(DataError, match=r"3 rows do not match the 2 training rows.*dvc repro cnn"):
        load_logits(tmp_path / "train.npz", labels[:2], "cnn")
    teacher = np.array([[1.0, 0.0], [0.0, 2.0], [0.5, 0.5]], np.float32)
    rows = {"teacher": teacher, "word_cnn": load_logits(tmp_path / "train.npz", labels, "cnn")}
    np.testing.assert_array_equal(combine({"teacher": 1.0, "word_cnn": 0.0}, rows), teacher)


def test_the_mix_averages_probabilities_and_returns_their_logits() -> None:
    teacher = np.array([[2.0, 0.0], [0.4, 0.0], [-1.0, 3.0]])
    other = log_probabilities(np.array([[0.5, 0.5], [0.1, 0.9], [0.8, 0.2]]))
    for share in (0.0, 0.3, 1.0):
        mixed = softmax(mix_soft_targets(teacher, other, share))
        np.testing.assert_allclose(mixed, (1 - share) * softmax(teacher) + share * softmax(other), atol=1e-6)
    # a confident second model outvotes a hesitant teacher: row 1 flips from label 0 to 1
    assert softmax(teacher).argmax(axis=1).tolist() == [0, 0, 1]
    assert mix_soft_targets(teacher, other, 0.5).argmax(axis=1).tolist() == [0, 1, 1]
    assert np.isfinite(mix_soft_targets(teacher, log_probabilities(np.array([[1.0, 0.0]] * 3)), 1.0)).all()
    with pytest.raises(ValueError, match="must be in"):
        mix_soft_targets(teacher, other, 1.5)
    with pytest.raises(ValueError, match="differ in shape"):
        mix_soft_targets(teacher, other[:2], 0.3)


def test_three_models_mix_by_their_shares_and_the_teacher_keeps_the_rest() -> None:
    teacher = np.array([[1.0, 0.0], [0.0, 1.0]])
    tfidf = log_probabilities(np.array([[0.4, 0.6], [0.9, 0.1]]))
    cnn = log_probabilities(np.array([[0.1, 0.9], [0.5, 0.5]]))
    mixed = softmax(mix_ensemble(teacher, [(tfidf, 0.3), (cnn, 0.3)]))
    np.testing.assert_allclose(mixed, 0.4 * softmax(teacher) + 0.3 * softmax(tfidf) + 0.3 * softmax(cnn), atol=1e-6)
    assert mixed[0].argmax() == 1 and softmax(teacher)[0].argmax() == 0  # two models outvote the teacher
    np.testing.assert_allclose(mix_ensemble(teacher, []), log_probabilities(softmax(teacher)), atol=1e-6)
    with pytest.raises(ValueError, match="sum to at most 1"):
        mix_ensemble(teacher, [(tfidf, 0.6), (cnn, 0.6)])
    with pytest.raises(ValueError, match="differ in shape"):
        mix_ensemble(teacher, [(tfidf, 0.3), (cnn[:1], 0.3)])


def test_the_cnn_scores_rows_as_the_teacher_does_and_tfidf_texts() -> None:
    teacher = np.zeros((3, 2), np.float32)  # undecided: the mix shows the other two
    baseline = log_probabilities(np.array([[0.8, 0.2], [0.2, 0.8]]))  # per text
    cnn = log_probabilities(np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]))  # per row
    text_index = np.array([0, 0, 1])
    cfg = SharesParams(teacher=0.0, tfidf=0.5, word_cnn=0.5)
    mixed = softmax(combine(cfg.of(), {"tfidf": baseline[text_index], "word_cnn": cnn}))
    np.testing.assert_allclose(mixed[:, 1], [0.6, 0.1, 0.65], atol=1e-6)
    only_cnn = SharesParams(teacher=0.5, tfidf=0.0, word_cnn=0.5)
    np.testing.assert_allclose(softmax(combine(only_cnn.of(), {"teacher": teacher, "word_cnn": cnn}))[:, 1],
                               [0.75, 0.25, 0.5], atol=1e-6)
    with pytest.raises(DataError, match="label columns differ"):
        combine(only_cnn.of(), {"teacher": teacher, "word_cnn": cnn[:, :0]})


def random_rows(n: int, seed: int) -> pd.DataFrame:
    """Texts that share no word, with labels that carry no signal (a unit test's random labels)."""
    labels = np.random.default_rng(seed).permutation(np.arange(n) % 2)
    return pd.DataFrame({"text": [f"word{i}x" for i in range(n)], "label": labels})


def test_out_of_fold_scores_come_from_models_that_never_saw_the_row() -> None:
    train = random_rows(60, seed=0)
    labels = train["label"].to_numpy()
    in_sample = build_baseline(UNIQUE_WORDS).fit(train["text"], labels).predict_proba(train["text"])
    assert (in_sample.argmax(axis=1) == labels).mean() == 1.0  # a row's own word gives its label away
    oof, none = out_of_fold(UNIQUE_WORDS, train, None, folds=3, seed=0)
    assert oof.shape == (60, 2) and none.shape == (0, 2)
    np.testing.assert_allclose(oof.sum(axis=1), 1.0)
    # held out, a row's word is unknown: every score is the other folds' prior, never the row's label
    assert np.abs(oof[:, 1] - 0.5).max() < 0.1
    # the extra task's rows are fitted on by every fold: here they hold the very texts, so the scores know them
    with_extra, _ = out_of_fold(UNIQUE_WORDS, train, train.copy(), folds=3, seed=0)
    assert (with_extra.argmax(axis=1) == labels).mean() == 1.0
    np.testing.assert_array_equal(oof, out_of_fold(UNIQUE_WORDS, train, None, folds=3, seed=0, jobs=2)[0])


def test_unlabelled_texts_are_scored_by_a_model_fitted_on_every_training_row() -> None:
    train = random_rows(60, seed=1)
    labels = train["label"].to_numpy()
    unlabelled = [f"{text} unseen" for text in train["text"][:10]] + ["nothing known here"]
    oof, scored = out_of_fold(UNIQUE_WORDS, train, None, folds=3, seed=0, jobs=2, unlabelled=unlabelled)
    full = build_baseline(UNIQUE_WORDS).fit(train["text"], labels)
    np.testing.assert_allclose(scored, full.predict_proba(unlabelled))
    # a text sharing a training row's word gets that row's label: the full model knows every row
    assert (scored[:10].argmax(axis=1) == labels[:10]).all()
    np.testing.assert_array_equal(oof, out_of_fold(UNIQUE_WORDS, train, None, folds=3, seed=0)[0])


def test_out_of_fold_needs_every_label_in_every_fold() -> None:
    train = pd.DataFrame({"text": ["good film", "great film", "bad film"], "label": [1, 1, 0]})
    with pytest.raises(DataError, match=r"a label with 1 rows, fewer than the 2 folds the TF-IDF source is scored out of"):
        out_of_fold(UNIQUE_WORDS, train, None, folds=2, seed=0)


def test_a_zero_share_fits_nothing_and_the_student_learns_from_the_teacher_alone() -> None:
    train = random_rows(3, seed=0)  # too few rows to fit folds: proof that nothing is fitted
    logits, transfer, metrics = out_of_fold_logits(UNIQUE_WORDS, 0, 0.0, train, None, jobs=1, unlabelled=["a", "b"])
    assert logits.shape == (3, 0) and transfer.shape == (2, 0) and metrics["skipped"]
    teacher = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    teacher_only = SharesParams(teacher=1.0, tfidf=0.0, word_cnn=0.0)
    np.testing.assert_array_equal(combine(teacher_only.of(), {"teacher": teacher}), teacher)  # passed through


def test_a_share_scores_every_row_out_of_the_fixed_folds_drawn_by_the_seed() -> None:
    rng = np.random.default_rng(2)  # words shared across rows: which rows a fold fits on changes its scores
    train = pd.DataFrame({"text": [" ".join(f"w{j}" for j in rng.integers(0, 8, 3)) for _ in range(60)],
                          "label": rng.permutation(np.arange(60) % 2)})
    logits, transfer, metrics = out_of_fold_logits(UNIQUE_WORDS, 3, 0.5, train, None, jobs=1, unlabelled=["w1 w2"])
    oof, scored = out_of_fold(UNIQUE_WORDS, train, None, folds=FOLDS, seed=3, unlabelled=["w1 w2"])
    np.testing.assert_allclose(logits, log_probabilities(oof), atol=1e-6)
    np.testing.assert_allclose(transfer, log_probabilities(scored), atol=1e-6)
    other_seed = out_of_fold_logits(UNIQUE_WORDS, 4, 0.5, train, None, jobs=1)[0]
    assert np.abs(other_seed - logits).max() > 1e-3, "the seed draws the folds"
    assert metrics["folds"] == FOLDS and not metrics["skipped"] and metrics["rows"] == 60


def test_per_text_scores_follow_the_rows_each_text_became() -> None:
    teacher = np.zeros((4, 2), np.float32)  # an undecided teacher: the mix shows the baseline's per-text view
    baseline = log_probabilities(np.array([[0.9, 0.1], [0.2, 0.8]]))
    cfg = SharesParams(teacher=0.5, tfidf=0.5, word_cnn=0.0)
    text_index = np.array([0, 0, 0, 1])  # text 0 became three windows
    mixed = softmax(combine(cfg.of(), {"teacher": teacher, "tfidf": baseline[text_index]}))
    np.testing.assert_allclose(mixed[:, 1], [0.3, 0.3, 0.3, 0.65], atol=1e-6)


def test_transfer_rows_follow_the_training_rows_labelled_by_their_soft_targets() -> None:
    train = ([[1, 5, 2], [1, 6, 2]], np.array([0, 1]))
    targets = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    transfer_targets = log_probabilities(np.array([[0.2, 0.8], [0.7, 0.3], [0.45, 0.55]]))
    (sequences, labels), all_targets = with_transfer(train, targets, [[1, 7, 2], [1, 8, 2], [1, 9, 2]], transfer_targets)
    assert sequences == [[1, 5, 2], [1, 6, 2], [1, 7, 2], [1, 8, 2], [1, 9, 2]]
    assert labels.tolist() == [0, 1, 1, 0, 1]  # the training labels, then each transfer row's argmax
    np.testing.assert_allclose(all_targets, np.concatenate([targets, transfer_targets]))
    (sequences, labels), all_targets = with_transfer(train, targets, [], transfer_targets[:0])
    assert sequences == train[0] and labels.tolist() == [0, 1] and all_targets.shape == (2, 2)


def test_shares_on_validation_finds_the_member_that_is_right_and_prefers_equal_shares_on_ties():
    labels = np.array([0, 1, 0, 1])
    right = np.eye(2)[labels] * 0.2 + 0.4  # every row right, at 0.6
    wrong = np.eye(2)[1 - labels] * 0.8 + 0.1  # every row wrong, at 0.9: the mix is right while its share is under 0.2
    shares, acc = shares_on_validation([wrong, right], labels)
    assert acc == 1.0
    assert shares == (0.1, 0.9)  # of the shares 0 and 0.1 that tie at 1.0, the nearer to halves
    same = shares_on_validation([right, right, right], labels)
    assert same == ((0.3, 0.3, 0.4), 1.0)  # all tie: the grid point nearest to thirds
    with pytest.raises(ValueError, match="step"):
        shares_on_validation([right], labels, step=0.3)
    with pytest.raises(ValueError, match="one shape"):
        shares_on_validation([right, right[:3]], labels)


def test_the_sources_mix_as_the_shares_say_and_the_folder_round_trips(tmp_path: Path) -> None:
    """The one seam: a mix of three sources at 0.5 / 0.3 / 0.2 is that average of probabilities, the section's
    shares must sum to 1, and the folder distill reads gives back what was saved (a damaged one is refused)."""
    rng = np.random.default_rng(0)
    rows = {name: rng.normal(size=(5, 3)).astype(np.float32) for name in ("teacher", "tfidf", "word_cnn")}
    cfg = SharesParams(teacher=0.5, tfidf=0.3, word_cnn=0.2)
    expected = 0.5 * softmax(rows["teacher"]) + 0.3 * softmax(rows["tfidf"]) + 0.2 * softmax(rows["word_cnn"])
    np.testing.assert_allclose(softmax(combine(cfg.of(), rows)), expected, atol=1e-6)
    with pytest.raises(ConfigError, match="must sum to 1"):
        SharesParams(teacher=0.5, tfidf=0.3, word_cnn=0.3)
    targets = SoftTargets(combine(cfg.of(), rows), np.array([0, 1, 2, 0, 1]), np.zeros((2, 3), np.float32),
                          ["one text", "another"], {"sources": cfg.of()})
    save_soft_targets(tmp_path / "st", targets)
    back = load_soft_targets(tmp_path / "st")
    np.testing.assert_array_equal(back.train, targets.train)
    assert back.labels.tolist() == [0, 1, 2, 0, 1] and back.transfer_texts == ["one text", "another"]
    assert back.manifest == {"sources": {"teacher": 0.5, "tfidf": 0.3, "word_cnn": 0.2}}
    (tmp_path / "st" / "targets.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a soft_targets folder"):
        load_soft_targets(tmp_path / "st")


@pytest.mark.parametrize("stale", ["labels", "transfer"])
def test_the_student_refuses_targets_stale_for_the_rows_in_use(tmp_path: Path, stale: str) -> None:
    """distill reads the targets as they match its rows: a changed split or a transfer set cut otherwise is named,
    with the stage to rerun, before any training."""
    from conftest import toy_texts, toy_tokenizer

    from minibert.contract import Contract, Windows
    from minibert.trainer import NullTracker
    from pipeline.params import Params
    from pipeline.stages.distill import Inputs, run

    tok, _ = toy_tokenizer(tmp_path)
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"text": toy_texts(rng, [6] * 5), "label": [0, 1, 0, 1, 1]})
    transfer_texts = toy_texts(rng, [6] * 3)
    rows = {"labels": 4 if stale == "labels" else 5, "transfer": 2 if stale == "transfer" else 3}
    targets = SoftTargets(np.zeros((rows["labels"], 2), np.float32), train["label"].to_numpy()[: rows["labels"]],
                          np.zeros((rows["transfer"], 2), np.float32), transfer_texts, {})
    contract = Contract("classifier", None, Windows(128, 64, "mean"), ("no", "yes"))
    inputs = Inputs(tok, train, train, targets, tmp_path / "soft_targets", tmp_path / "missing.safetensors", contract)
    match = {"labels": "4 target rows do not match the 5 training rows", "transfer": "2 transfer-set targets for 3 rows"}
    with pytest.raises(DataError, match=rf"soft_targets.*{match[stale]}.*dvc repro soft_targets"):
        run(Params(), inputs, NullTracker())


def test_the_sources_score_the_rows_they_are_handed_with_the_model_they_return(tmp_path: Path) -> None:
    """teacher_logits and cnn hand soft_targets one logit row a training row and a transfer row, from the model the
    stage returns (the cnn trained on the intermediate task's rows too, which it does not score)."""
    import dataclasses

    import torch
    from conftest import toy_classifier, toy_texts, toy_tokenizer

    from minibert.inference import predict_logits
    from minibert.trainer import NullTracker
    from pipeline.params import Params
    from pipeline.stages import cnn, teacher_logits

    tok, _ = toy_tokenizer(tmp_path)
    rng = np.random.default_rng(2)

    def rows(count: int) -> list[list[int]]:
        return [tok.encode(text).ids[:30] for text in toy_texts(rng, [5, 9, 14] * (count // 3))]

    train, transfer, extra = rows(24), rows(9), rows(12)
    labels = rng.integers(0, 2, len(train))
    teacher = toy_classifier(tok)
    logits, transfer_logits, metrics = teacher_logits.run("fp32", teacher, (train, labels), transfer)
    np.testing.assert_allclose(logits, predict_logits(teacher, train, batch_size=8), atol=1e-5)
    assert transfer_logits.shape == (9, 2) and metrics["rows"] == 24 and metrics["transfer_rows"] == 9
    assert metrics["teacher_train_accuracy"] == float((logits.argmax(1) == labels).mean())

    base = Params()
    params = dataclasses.replace(base, train=dataclasses.replace(base.train, precision="fp32", eval_every=2),
                                 cnn=dataclasses.replace(base.cnn, filters=4, batch_size=8, time_budget_min=None, epochs=1.0))
    val = pd.DataFrame({"text": toy_texts(rng, [7] * 6), "label": [0, 1] * 3})
    torch.manual_seed(0)
    vectors = torch.randn(tok.get_vocab_size(), 16)
    both = (train + extra, np.concatenate([labels, rng.integers(0, 2, len(extra))]))
    out = cnn.run(params, cnn.Inputs(tok, vectors, both, (train, labels), transfer, val, 2), NullTracker())
    np.testing.assert_allclose(out.logits, predict_logits(out.model, train, batch_size=8), atol=1e-5)
    np.testing.assert_allclose(out.transfer_logits, predict_logits(out.model, transfer, batch_size=8), atol=1e-5)
    assert out.metrics["rows"] == 24 and out.metrics["extra_rows"] == 12 and out.metrics["skipped"] is False
