"""SST-2's training rows are the phrases of parse trees: a sentence and every sub-phrase of it,
each labelled. A validation split drawn row by row holds out phrases whose sentence, or whose
own sub-phrases, stay in training (88.6 % of the 3,348 random rows the default carved did), so
it scores recall of seen text, not sentences like GLUE dev's.

``held_out_sentences`` carves the split by whole trees instead: it holds out sentences (the
phrases no other phrase contains, GLUE dev's 19.5 words on average) and drops from training
every phrase inside a held-out one. Pure: a table in, tables and a count out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd


def root_phrases(texts: Sequence[str]) -> np.ndarray:
    """(len(texts),) bool: True where no other text contains this one on word boundaries (the
    sentences; a sub-phrase of a sentence GLUE left out as neutral becomes a root of its own)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    is_root = np.zeros(len(texts), dtype=bool)
    padded: list[str] = []  # the roots found so far, " root "
    by_word: dict[str, list[int]] = {}  # word -> the roots holding it
    for i in order:  # longest first: whatever contains a text is a root, or inside one, before it
        words = texts[i].split()
        rarest = min(words, key=lambda w: len(by_word.get(w, ())))
        needle = f" {texts[i]} "
        if any(needle in padded[r] for r in by_word.get(rarest, ())):
            continue
        is_root[i] = True
        for word in set(words):
            by_word.setdefault(word, []).append(len(padded))
        padded.append(needle)
    return is_root


def inside_any(texts: Sequence[str], containers: Iterable[str]) -> np.ndarray:
    """(len(texts),) bool: True where the text is one of ``containers`` or a phrase inside one."""
    haystack = "".join(f"\n {t} " for t in containers) + "\n"  # " p " in it: p on whole-word bounds
    return np.fromiter((f" {t} " in haystack for t in texts), dtype=bool, count=len(texts))


def held_out_sentences(df: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(train, val, dropped): ``fraction`` of the root sentences of each label held out (seeded),
    and every other phrase inside a held-out sentence dropped from train, counted in ``dropped``."""
    texts = df["text"].tolist()
    roots = df[root_phrases(texts)]
    rng = np.random.default_rng(seed)
    held: list[int] = []
    for _, group in roots.groupby("label", sort=True):
        n = int(round(len(group) * fraction))
        held.extend(rng.choice(group.index.to_numpy(), size=n, replace=False).tolist())
    is_val = df.index.isin(held)
    leaks = inside_any(texts, df.loc[is_val, "text"]) & ~is_val
    return df[~is_val & ~leaks].reset_index(drop=True), df[is_val].reset_index(drop=True), int(leaks.sum())
