"""The classification task a profile trains and evaluates, and how its texts become model inputs.

The prepared splits come from ``pipeline.splits``; training sequences are
cut to ``task.max_length`` (the head, head and tail, or every window: ``task.truncation``); every prediction
(validation, evaluation, export parity, serving) reads the whole text through sliding windows
of ``task.max_length`` tokens every ``task.stride`` tokens, their logits combined by
``task.aggregate``. SST-2 sentences fit one window; IMDb reviews take several.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from tokenizers import Tokenizer

from minibert.contract import Windows
from minibert.tokenizer import CLS, SEP, encode
from minibert.windows import chunk_document, document_windows
from pipeline.params import TaskParams


def reads(task: TaskParams, labels: tuple[str, ...]) -> tuple[Windows, tuple[str, ...]]:
    """How a model trained on ``task`` reads a text, and its class names (the prepared data's, label order):
    what its file records (``minibert.contract``)."""
    return Windows(task.max_length, task.stride, task.aggregate), tuple(labels)


def reading(task: TaskParams, windows: Windows) -> TaskParams:
    """``task`` read through a model's own ``windows`` (its contract's): the word-CNN may read longer ones."""
    return dataclasses.replace(task, max_length=windows.max_length, stride=windows.stride, aggregate=windows.aggregate)


def encode_train(tok: Tokenizer, df: pd.DataFrame, task: TaskParams) -> tuple[list[list[int]], np.ndarray]:
    """Training sequences and their labels. ``task.truncation``: "head" / "head_tail" cut a long
    text to one sequence of task.max_length; "windows" makes every text all its consecutive,
    non-overlapping windows of task.max_length, each labelled as the text (a review of 3 windows
    gives 3 rows: every token is trained on, not just the first and last ones)."""
    sequences, labels, _ = encode_train_indexed(tok, df, task)
    return sequences, labels


def encode_train_indexed(tok: Tokenizer, df: pd.DataFrame, task: TaskParams) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """``encode_train`` plus, for each training sequence, the position in ``df`` of the text it came
    from (the identity unless ``task.truncation`` is "windows"): per-text scores follow the rows with it."""
    labels = df["label"].to_numpy()
    if task.truncation != "windows":
        return encode(tok, df["text"].tolist(), task.max_length, task.truncation), labels, np.arange(len(df))
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    windows = [chunk_document(ids, task.max_length, cls_id, sep_id) or [[cls_id, sep_id]]
               for ids in encode_documents(tok, df["text"].tolist())]
    text_index = np.repeat(np.arange(len(df)), [len(doc) for doc in windows])
    return [w for doc in windows for w in doc], labels[text_index], text_index


def text_windows(tok: Tokenizer, texts: list[str], windows: Windows | TaskParams) -> tuple[list[list[int]], np.ndarray]:
    """``texts`` as a model reads them: the token-id windows of each in turn (``windows.max_length`` tokens every
    ``windows.stride``, ``minibert.windows.document_windows``), and how many windows each text gave."""
    return document_windows(encode_documents(tok, texts), windows.max_length, windows.stride, tok.token_to_id(CLS),
                            tok.token_to_id(SEP))


def encode_documents(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Whole texts as ids without special tokens, for sliding windows."""
    tok.no_truncation()
    tok.no_padding()
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
