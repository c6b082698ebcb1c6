"""Attention pictures and head statistics for a trained classifier: used by ``evaluate`` (logged
with the run) and by ``minibert attention`` (on demand).

The informative words are the baseline's: the unigrams with the largest absolute weights (for any
class) in the TF-IDF + logistic-regression model trained on the same data, so the set comes from
the task's own training split rather than a hand-made list (for a sentiment task, its sentiment words).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tokenizers import Tokenizer
from torch import nn

from minibert.batching import pad_batch
from minibert.introspect import attention_maps, head_statistics
from minibert.tokenizer import CLS, SEP, encodable
from pipeline.attention_plots import attention_grid_chart, attention_head_chart, head_statistics_chart
from pipeline.io import DataError

HEAD_ROWS = 256  # test rows the per-head statistics average over
LEXICON_SIZE = 100  # the baseline's top-|weight| unigrams: the "informative words" heads are scored on


def informative_words(baseline: object, size: int) -> set[str]:
    """The ``size`` single words with the largest |weight| for any class in a fitted TF-IDF + LR pipeline."""
    vectorizer, logreg = baseline.named_steps["tfidf"], baseline.named_steps["logreg"]  # type: ignore[attr-defined]
    names = vectorizer.get_feature_names_out()
    weights = np.abs(logreg.coef_).max(axis=0)
    unigrams = np.array([" " not in n for n in names])
    order = np.argsort(-weights[unigrams], kind="stable")[:size]
    return set(names[unigrams][order].tolist())


def encode_sentences(tok: Tokenizer, texts: Sequence[str], max_length: int,
                     lexicon: Collection[str] = ()) -> tuple[torch.Tensor, torch.Tensor, list[list[str]], torch.Tensor]:
    """(ids (B, T), mask (B, T), tokens a sentence, informative-word flags (B, T)) with [CLS] / [SEP],
    cut to ``max_length``. A word piece is flagged when the whole word it belongs to is in
    ``lexicon`` (word pieces joined, lowercased)."""
    tok.no_padding()  # padding here would make [PAD] look like a real token
    encodings = tok.encode_batch([encodable(t) for t in texts], add_special_tokens=True)
    ids, tokens, flags = [], [], []
    for enc in encodings:
        keep = min(len(enc.ids), max_length)
        words: dict[int, str] = {}
        for token, word in zip(enc.tokens, enc.word_ids, strict=True):
            if word is not None:
                words[word] = words.get(word, "") + token.removeprefix("##")
        ids.append(enc.ids[:keep])
        tokens.append(enc.tokens[:keep])
        flags.append([w is not None and words[w].lower() in lexicon for w in enc.word_ids[:keep]])
    batch_ids, mask = pad_batch(ids, pad_id=0)
    marked, _ = pad_batch([[int(f) for f in row] for row in flags], pad_id=0)
    return batch_ids, mask, tokens, marked.bool()


def head_table(model: nn.Module, tok: Tokenizer, texts: Sequence[str], max_length: int, lexicon: Collection[str],
               batch_size: int = 64) -> pd.DataFrame:
    """Per-head statistics over ``texts``: one row a (layer, head), a column a measure."""
    totals: dict[str, torch.Tensor] = {}
    weights: dict[str, float] = {}
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    for start in range(0, len(texts), batch_size):
        ids, mask, _, informative = encode_sentences(tok, texts[start : start + batch_size], max_length, lexicon)
        maps = attention_maps(model, ids, mask)
        targets = {"cls": ids == cls_id, "sep": ids == sep_id, "informative": informative}
        stats = head_statistics(maps, mask, targets)
        # the batch's weight in each average: its real queries (texts with an informative word, for that one)
        has_word = (informative & mask.bool()).any(dim=1)
        counts = {name: float(mask.sum()) for name in stats}
        counts["informative"] = float(mask[has_word].sum())
        for name, value in stats.items():
            totals[name] = totals.get(name, torch.zeros_like(value)) + value * counts[name]
            weights[name] = weights.get(name, 0.0) + counts[name]
    layers, heads = next(iter(totals.values())).shape
    rows = []
    for layer in range(layers):
        for head in range(heads):
            rows.append({"layer": layer, "head": head, **{name: float(totals[name][layer, head] / max(weights[name], 1.0))
                                                           for name in totals}})
    return pd.DataFrame(rows)


def sentence_pictures(model: nn.Module, tok: Tokenizer, text: str, max_length: int, out: str | os.PathLike[str],
                      layer: int | None = None, head: int | None = None) -> Path:
    """One sentence's attention: every head as a grid, or (``layer`` and ``head`` given) that head alone."""
    ids, mask, tokens, _ = encode_sentences(tok, [text], max_length)
    maps = attention_maps(model, ids, mask)[0].numpy()  # (L, H, T, T)
    layers, heads = maps.shape[:2]
    if layer is None and head is None:
        return attention_grid_chart(maps, tokens[0], out, f"attention of every head: {text!r}")
    if layer is None or head is None or not (0 <= layer < layers and 0 <= head < heads):
        raise DataError(f"--layer {layer} --head {head}: this model has layers 0..{layers - 1} and heads 0..{heads - 1}; "
                         "give both, or neither for the grid of every head")
    return attention_head_chart(maps[layer, head], tokens[0], out, f"layer {layer}, head {head}: {text!r}")


def head_statistics_picture(table: pd.DataFrame, out: str | os.PathLike[str], rows: int) -> Path:
    return head_statistics_chart(table, out, f"where each head looks, mean over the real tokens of {rows} test sentences")
