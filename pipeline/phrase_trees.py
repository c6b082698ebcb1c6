"""SST-2's training rows are the phrases of parse trees: a sentence and every sub-phrase of it,
each labelled. A validation split drawn row by row holds out phrases whose sentence, or whose
own sub-phrases, stay in training (88.6 % of the 3,348 random rows the default carved did), so
it scores recall of seen text, not sentences like GLUE dev's.

``root_phrases`` finds the sentences (the phrases no other phrase contains, GLUE dev's 19.5
words on average) and ``inside_any`` the phrases inside given sentences, so that ``prepare``
can hold out whole trees. Pure: texts in, masks out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


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
