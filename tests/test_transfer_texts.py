"""The distillation transfer set: sentences cut from the unlabelled reviews, never a labelled split's text,
deterministic in its seed; and the ``transfer_set`` stage on real rows (``stage_project`` in conftest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED, run_stage

from pipeline.soft_targets import UNLABELLED
from pipeline.transfer_texts import (
    MAX_WORDS,
    MIN_WORDS,
    labelled_texts,
    load_transfer_split,
    review_sentences,
    transfer_texts,
)

REVIEWS = [
    "A fine film. The cast is superb and the plot holds!<br /><br />Would I see it again? Yes, twice.",
    "Dull. Nothing here works at all, and the jokes fall flat every single time.",
    "The cast is superb and the plot holds! A long slow middle drags the whole second act down.",
]


def test_sentences_are_cut_after_end_marks_and_line_breaks_within_the_word_bounds() -> None:
    assert review_sentences(REVIEWS[0], min_words=1, max_words=50) == [
        "A fine film.", "The cast is superb and the plot holds!", "Would I see it again?", "Yes, twice."]
    assert review_sentences(REVIEWS[0], min_words=4, max_words=6) == ["Would I see it again?"]


def test_transfer_texts_are_distinct_capped_and_never_a_labelled_text() -> None:
    labelled = ["Dull. Nothing here works at all, and the jokes fall flat every single time.",  # a whole review
                "A long slow middle drags the whole second act down."]  # one sentence of a review
    texts = transfer_texts(REVIEWS, labelled, 100, 0)
    assert sorted(texts) == sorted(["The cast is superb and the plot holds!", "Would I see it again?"])
    assert len(texts) == len(set(texts)), "the sentence both reviews hold comes once"
    capped = transfer_texts(REVIEWS, labelled, 1, 0)
    assert len(capped) == 1 and capped[0] in texts
    assert transfer_texts(REVIEWS, labelled, 0, 0) == []


def test_the_seed_orders_the_reviews_and_sentences_keep_the_word_bounds() -> None:
    corpus = [f"Review number {i} is here. It has two sentences of words." for i in range(40)]
    first = transfer_texts(corpus, [], 10, 0)
    assert first == transfer_texts(corpus, [], 10, 0), "deterministic"
    assert first != transfer_texts(corpus, [], 10, 1)
    everything = transfer_texts(corpus + ["Too short. " + " ".join(["long"] * (MAX_WORDS + 1)) + "."], [], 1000, 0)
    assert sorted(everything) == sorted({f"Review number {i} is here." for i in range(40)} | {"It has two sentences of words."})
    assert all(MIN_WORDS <= len(t.split()) <= MAX_WORDS for t in everything)


def test_the_transfer_split_is_unlabelled(tmp_path: Path) -> None:
    pd.DataFrame({"text": ["one sentence here .", "another one there ."]}).to_parquet(tmp_path / "t.parquet")
    split = load_transfer_split(tmp_path / "t.parquet")
    assert split["text"].tolist() == ["one sentence here .", "another one there ."]
    assert (split["label"] == UNLABELLED).all()


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "sst2").is_dir(), reason=f"{SHARED} not present")
def test_the_stage_cuts_unlabelled_reviews_and_refuses_a_corpus_without_text(stage_project: Path,
                                                                               tmp_path: Path) -> None:
    data = stage_project / "data" / "prepared"
    out = run_stage(stage_project, "transfer_set", "--data", data, "--out", tmp_path / "t" / "texts.parquet",
                    "--metrics", tmp_path / "t.json")
    assert out.returncode == 0, out.stderr[-3000:]
    texts = pd.read_parquet(tmp_path / "t" / "texts.parquet")["text"].tolist()
    assert len(texts) == 200 == len(set(texts))  # the tiny profile's rows
    assert not set(texts) & labelled_texts(data)
    assert all(4 <= len(t.split()) <= 50 for t in texts)
    bad = tmp_path / "bad"
    bad.mkdir()
    pd.DataFrame({"review": ["a text"]}).to_parquet(bad / "corpus.parquet")
    out = run_stage(stage_project, "transfer_set", "--data", bad, "--out", tmp_path / "b" / "texts.parquet",
                    "--metrics", tmp_path / "b.json")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "corpus.parquet: missing column(s) ['text']" in out.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.json").exists()


def test_teacher_logits_follow_the_input_order_and_an_empty_set_keeps_the_label_columns(tmp_path: Path) -> None:
    from conftest import toy_classifier, toy_texts, toy_tokenizer

    from minibert.inference import predict_logits
    from minibert.tokenizer import encode
    from pipeline.scoring import teacher_logits

    tok, _ = toy_tokenizer(tmp_path)
    model = toy_classifier(tok)
    sequences = encode(tok, toy_texts(np.random.default_rng(1), [3, 20, 7, 12, 5]), 64)
    logits = teacher_logits(model, sequences, "test")
    np.testing.assert_allclose(logits, predict_logits(model, sequences, batch_size=2), atol=1e-5)
    assert teacher_logits(model, [], "test").shape == (0, 2)
