"""The distillation transfer set: unlabelled texts cut from the pretraining corpus (pure functions).

The student learns the soft targets (stage ``soft_targets``) on these
texts as well as on the labelled training rows: the transfer set of Hinton et al. (2015), with
the in-domain unlabelled IMDb reviews as its source, cut into sentences of ``MIN_WORDS`` to
``MAX_WORDS`` words (the length of SST-2's rows). Texts of any labelled split are never used, so no
test sentence reaches the student through its teacher.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.io import read_table
from pipeline.soft_targets import UNLABELLED

CORPUS = "corpus.parquet"  # the prepared data's unlabelled pretraining corpus
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
MIN_WORDS, MAX_WORDS = 4, 50  # a transfer sentence's length in words


def review_sentences(text: str, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS) -> list[str]:
    """The sentences of a review (split after . ! ?) of min_words..max_words words."""
    parts = SENTENCE_END.split(LINE_BREAK.sub(" ", text))
    return [s.strip() for s in parts if min_words <= len(s.split()) <= max_words]


def transfer_texts(corpus: Sequence[str], exclude: Iterable[str], rows: int, seed: int) -> list[str]:
    """Up to ``rows`` distinct sentences from ``corpus`` (visited in a ``seed`` order), none of them,
    and none cut from, a text in ``exclude`` (the labelled splits)."""
    if rows == 0:
        return []
    excluded = set(exclude)
    seen: set[str] = set()
    out: list[str] = []
    for text in _shuffled(corpus, seed):
        if text in excluded:
            continue
        for sentence in review_sentences(text):
            if sentence not in excluded and sentence not in seen:
                seen.add(sentence)
                out.append(sentence)
                if len(out) == rows:
                    return out
    return out


def _shuffled(corpus: Sequence[str], seed: int) -> Iterator[str]:
    for i in np.random.default_rng(seed).permutation(len(corpus)):
        yield corpus[i]


def load_transfer_split(path: Path) -> pd.DataFrame:
    """The transfer set (stage transfer_set) as a split of label -1 rows, for the task's encoder."""
    texts = read_table(path, ["text"])["text"]
    return pd.DataFrame({"text": texts.astype(str), "label": np.full(len(texts), UNLABELLED, np.int64)})


def labelled_texts(data_dir: Path) -> set[str]:
    """Every text of every prepared table but the corpus: the splits a student is scored or trained on."""
    tables = sorted(p for p in data_dir.glob("*.parquet") if p.name != CORPUS)
    return {text for path in tables for text in read_table(path, ["text"])["text"]}
