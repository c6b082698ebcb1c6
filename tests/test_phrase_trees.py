"""SST-2's validation split by whole trees: held-out sentences take their phrases out of training."""

import numpy as np
import pandas as pd

from pipeline.datasets import carve
from pipeline.phrase_trees import inside_any, root_phrases


def split_by_sentences(df: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    return carve(df, fraction, f"{seed}:val", "phrases")


def tree(sentence: str, label: int) -> list[tuple[str, int]]:
    """A sentence and its phrases, as SST-2 lists them (sub-phrases here: every run of 2+ words)."""
    words = sentence.split()
    spans = {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 2, len(words) + 1)}
    return [(s, label) for s in sorted(spans, key=len, reverse=True)]


def test_roots_are_the_texts_no_other_text_contains_on_word_boundaries() -> None:
    texts = ["a fine film", "fine film", "film", "a fine", "films of note", "of", "the end"]
    # "film" is not inside "films of note" on a word boundary, but is inside "a fine film"
    assert root_phrases(texts).tolist() == [True, False, False, False, True, False, True]
    assert inside_any(["fine", "ilm", "a fine film", "note"], ["a fine film"]).tolist() == [True, False, True, False]


def test_held_out_sentences_leave_no_phrase_of_theirs_in_training() -> None:
    sentences = [f"the {adj} film number {i} is {adj}" for i, adj in enumerate(["good", "bad"] * 20)]
    rows = [row for i, s in enumerate(sentences) for row in tree(s, 1 - i % 2)]
    df = pd.DataFrame(rows, columns=["text", "label"]).drop_duplicates("text", keep="first").reset_index(drop=True)
    train, val, dropped = split_by_sentences(df, 0.1, seed=0)
    assert sorted(val["text"]) == sorted(set(val["text"]) & set(sentences)) and 1 <= len(val) <= 10, "whole sentences"
    for sentence in val["text"]:
        words = f" {sentence} "
        assert not any(f" {t} " in words for t in train["text"]), f"a phrase of {sentence!r} stayed in training"
    # shared phrases ("the good film", "is good") go too; the other sentences' own phrases stay
    assert dropped == len(df) - len(train) - len(val) > 0
    assert set(sentences) - set(val["text"]) <= set(train["text"])
    again = split_by_sentences(df, 0.1, seed=0)
    assert again[0].equals(train) and again[1].equals(val)
    assert not split_by_sentences(df, 0.1, seed=1)[1].equals(val)


def test_a_row_by_row_split_of_the_same_trees_would_leak() -> None:
    """What the sentence split fixes: rows held out one by one sit inside training sentences."""
    rows = [row for i in range(20) for row in tree(f"scene {i} was very moving indeed", 1)]
    df = pd.DataFrame(rows, columns=["text", "label"]).drop_duplicates("text").reset_index(drop=True)
    held = df.sample(frac=0.1, random_state=0)
    rest = df.drop(held.index)
    assert inside_any(held["text"].tolist(), rest["text"]).mean() > 0.5
    train, val, _ = split_by_sentences(df, 0.1, seed=0)
    assert not inside_any(val["text"].tolist(), train["text"]).any()


def test_roots_match_a_brute_force_search() -> None:
    rng = np.random.default_rng(0)
    vocab = ["a", "b", "c", "ab", "d"]
    texts = sorted({" ".join(rng.choice(vocab, size=rng.integers(1, 6))) for _ in range(300)})
    brute = [not any(o != t and f" {t} " in f" {o} " for o in texts) for t in texts]
    assert root_phrases(texts).tolist() == brute and 0 < sum(brute) < len(texts)
