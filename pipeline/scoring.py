"""Scoring a classifier on a set of texts: the validation pass every training loop selects on, logits of a
whole set (soft targets, parity checks) in chunks with a progress bar, and raw texts to logits (``text_logits``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd
from tokenizers import Tokenizer
from torch import Tensor, nn

from minibert.contract import Windows
from minibert.inference import predict_documents, predict_logits, predict_windows
from minibert.model import SequenceClassifier
from minibert.tokenizer import CLS, SEP
from pipeline.params import TaskParams
from pipeline.progress import progress
from pipeline.task import encode_documents, text_windows

Logits = Callable[[list[str]], np.ndarray]  # texts -> (N, L) logits
CHUNK_ROWS = 4096  # rows a progress-bar step when a model scores a whole set


class Validation(NamedTuple):
    """What a loop scores itself on: model -> logits, the labels, and the tokens it reads."""

    logits: Callable[[SequenceClassifier], np.ndarray]
    labels: np.ndarray
    tokens: int = 0  # tokens its windows hold: the final pass's time is kept back from the budget by them (trainer.fit)


def validation(tok: Tokenizer, df: pd.DataFrame, task: TaskParams | Windows, precision: str = "fp32") -> Validation:
    """(model -> logits on ``df`` through the task's sliding windows, labels, tokens the windows
    hold); ``precision`` as the training loop's, so that a bf16 run's validation passes inside its
    time budget run in bf16 too."""
    windows, counts = text_windows(tok, df["text"].tolist(), task)
    # the windows are the same every pass: cut once, scored each pass
    return Validation(lambda m: predict_windows(m, windows, counts, task.aggregate, 128, precision),
                      df["label"].to_numpy(), sum(len(w) for w in windows))


def chunked_logits(model: nn.Module, sequences: list[list[int]], what: str, num_labels: int,
                   precision: str = "fp32", batch_size: int = 128) -> np.ndarray:
    """(N, num_labels) logits of any ``model(ids, mask)``; a progress-bar step a chunk, each chunk batched by length."""
    chunks = range(0, len(sequences), CHUNK_ROWS)
    out = [predict_logits(model.eval(), sequences[i : i + CHUNK_ROWS], batch_size=batch_size, precision=precision)
           for i in progress(chunks, what, unit="chunk")]
    return np.concatenate(out) if out else np.zeros((0, num_labels), np.float32)


def teacher_logits(teacher: SequenceClassifier, sequences: list[list[int]], what: str, precision: str = "fp32") -> np.ndarray:
    return chunked_logits(teacher, sequences, what, teacher.head.classifier.out_features, precision)


def document_logits(
    model: nn.Module | Callable[[Tensor, Tensor], Tensor], tok: Tokenizer, task: TaskParams | Windows, batch_size: int,
    precision: str = "fp32",
) -> Callable[[list[list[int]]], np.ndarray]:
    """Encoded documents -> (N, L) logits through the task's sliding windows (``precision``: fp32 | bf16 | auto)."""
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    return lambda docs: predict_documents(model, docs, task.max_length, task.stride, task.aggregate, batch_size,
                                          cls_id, sep_id, precision)


def text_logits(model: nn.Module | Callable[[Tensor, Tensor], Tensor], tok: Tokenizer, task: TaskParams | Windows,
                batch_size: int, precision: str = "fp32") -> Logits:
    """Raw texts -> (N, L) logits: tokenization included (what a user of the model pays)."""
    predict = document_logits(model, tok, task, batch_size, precision)
    return lambda texts: predict(encode_documents(tok, texts))
