"""The deployment gate: which inference paths (``minibert.engines``) a deployable graph may answer on.

Every path this host can run reads the test split of record end to end (``minibert.runtime.TextClassifier``,
the graph's own windows) and is held against the torch fp32 model read the same way: argmax agreement at least
``MIN_AGREEMENT``, accuracy within ``MAX_ACCURACY_DROP``, and no logit further than ``TOLERANCE[precision]``
(the path's compute precision; the int8 graph's quantisation noise is inside every one). The paths that pass
go into the graph's parity record (``minibert.contract.Parity``) with their numbers, beside ``PROBE_WINDOWS``
test windows and the torch logits of them, so that a serving host that picks a path the record does not list
checks it at load (``minibert.runtime``). The portable path must pass: every host falls back to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from minibert.contract import Parity, Windows
from minibert.engines import PORTABLE_PATH, available_paths, load_engine
from minibert.inference import predict_logits
from minibert.runtime import RuntimeConfig, TextClassifier
from minibert.tokenizer import CLS, PAD, SEP
from minibert.windows import document_windows
from pipeline.io import StageError
from pipeline.task import encode_documents

MIN_AGREEMENT = 0.995  # argmax agreement with torch fp32 a path needs, on the test split and at load
MAX_ACCURACY_DROP = 0.003  # test accuracy a path may lose against torch fp32 (0.3 points)
# the largest |logit - torch fp32 logit| a path may show, by the precision it computes in (an int8 graph's
# quantisation error included; benchmarks/serving_runtimes.py measured the student's int8 graph at ...)
TOLERANCE = {"fp32": 0.5, "bf16": 0.75}
PROBE_WINDOWS = 256  # test windows (and their torch logits) the parity record carries for checks at load
BATCH = 32


def compare(logits: np.ndarray, reference: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """A path's logits of some texts against the torch fp32 logits of them: argmax agreement, the largest logit
    difference, and the accuracy it gains (negative: loses)."""
    return {"argmax_agreement": float((logits.argmax(1) == reference.argmax(1)).mean()),
            "max_abs_diff": float(np.abs(logits - reference).max()),
            "accuracy_delta": float((logits.argmax(1) == labels).mean() - (reference.argmax(1) == labels).mean())}


def keeps_answers(result: dict[str, float]) -> bool:
    """Agreement and accuracy within the gate's limits (the logit tolerance aside)."""
    return result["argmax_agreement"] >= MIN_AGREEMENT and result["accuracy_delta"] >= -MAX_ACCURACY_DROP


def gate(graph: Path, tok: Tokenizer, texts: list[str], labels: np.ndarray, reference: np.ndarray, threads: int,
         ) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """(the paths ``graph`` passes on with their numbers, the paths it fails or cannot load on with why), over
    ``texts`` against ``reference``, the torch fp32 logits of them. StageError when the portable path fails."""
    verified: dict[str, dict[str, float]] = {}
    refused: dict[str, str] = {}
    for path in available_paths():
        try:
            engine = load_engine(graph, path, threads=threads)
        except RuntimeError as err:
            refused[path] = f"does not load: {str(err).strip().splitlines()[-1]}"
            continue
        logits = TextClassifier(tok, engine, RuntimeConfig(batch_size=BATCH)).logits(texts)
        result = compare(logits, reference, labels)
        limit = TOLERANCE[path.split("/")[1]]
        if keeps_answers(result) and result["max_abs_diff"] <= limit:
            verified[path] = result
        else:
            refused[path] = (f"argmax agreement {result['argmax_agreement']:.4f} (needs >= {MIN_AGREEMENT}), accuracy "
                             f"{100 * result['accuracy_delta']:+.2f} points (limit -{100 * MAX_ACCURACY_DROP:.1f}), max "
                             f"|logit diff| {result['max_abs_diff']:.3g} (limit {limit})")
    if PORTABLE_PATH not in verified:
        raise StageError(f"{graph.name} on {PORTABLE_PATH} against torch fp32 on {len(texts)} test texts: "
                         f"{refused[PORTABLE_PATH]}; nothing written")
    return verified, refused


def parity_record(model: torch.nn.Module, tok: Tokenizer, texts: list[str], windows: Windows,
                  verified: dict[str, dict[str, float]]) -> Parity:
    """The record stamped into the deployed graph: ``verified``, and ``PROBE_WINDOWS`` evenly spaced test windows
    with the torch fp32 logits of them."""
    cut, _ = document_windows(encode_documents(tok, texts), windows.max_length, windows.stride, tok.token_to_id(CLS),
                              tok.token_to_id(SEP))
    probe = [cut[i] for i in np.unique(np.linspace(0, len(cut) - 1, min(PROBE_WINDOWS, len(cut))).round().astype(int))]
    logits = predict_logits(model.eval(), probe, batch_size=BATCH, pad_id=tok.token_to_id(PAD))
    return Parity(verified, tuple(tuple(w) for w in probe), tuple(tuple(float(x) for x in row) for row in logits),
                  dict(TOLERANCE), MIN_AGREEMENT)
