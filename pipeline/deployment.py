"""The deployment gate: which inference paths (``minibert.engines``) a deployable graph may answer on.

Every path this host can run reads the test split of record end to end (``minibert.runtime.TextClassifier``,
the graph's own windows) and is held against the torch fp32 model read the same way: argmax agreement at least
``MIN_AGREEMENT``, accuracy within ``MAX_ACCURACY_DROP``, and no logit further than ``TOLERANCE[precision]``
(the path's compute precision; the int8 graph's quantisation noise is inside every one). The paths that pass
go into the graph's parity record (``minibert.contract.Parity``) with their numbers, beside ``PROBE_WINDOWS``
test windows and the torch logits of them, so that a serving host that picks a path the record does not list
checks it at load (``minibert.runtime``). The portable path must pass: every host falls back to it.

The quantize stage's search sits here too: ``static_int8`` walks static int8's ``TIERS`` to the first graph that
keeps the answers on every path, and ``fastest_graph`` times the graphs that passed and picks the one to deploy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from minibert.contract import Contract, Parity, Windows, stamp_onnx
from minibert.engines import PORTABLE_PATH, available_paths, load_engine
from minibert.inference import predict_logits
from minibert.quantize import quantize_onnx_embeddings_int8, quantize_onnx_static_int8
from minibert.runtime import RuntimeConfig, TextClassifier, Timing, probe_timing, smallest_of_fastest
from minibert.tokenizer import PAD
from pipeline.io import StageError
from pipeline.params import QuantizeParams
from pipeline.task import text_windows

MIN_AGREEMENT = 0.995  # argmax agreement with torch fp32 a path needs, on the test split and at load
MAX_ACCURACY_DROP = 0.003  # test accuracy a path may lose against torch fp32 (0.3 points)
# the largest |logit - torch fp32 logit| a path may show, by the precision it computes in (an int8 graph's
# quantisation error included; benchmarks/serving_runtimes.py measured the student's int8 graph at ...)
TOLERANCE = {"fp32": 0.5, "bf16": 0.75}
PROBE_WINDOWS = 256  # test windows (and their torch logits) the parity record carries for checks at load
BATCH = 32

# static int8's tiers, tried in turn: (the operator types it quantises, whether the embedding tables go to int8 a row,
# weight-only: minibert.quantize.quantize_onnx_embeddings_int8). The first whose graph keeps the student's answers on
# validation (pipeline.deployment.keeps_answers) and passes the gate on test on every path is a candidate, and a
# smaller one before it that passes on some paths only is one too (``static_partial``), timed on those. The
# word-CNN's embeddings are most of its bytes: by row they cost it no answer, where ONNX Runtime's Gather
# quantisation (one scale a table, activations too) cost it 0.3 points of SST-2 (benchmarks/JOURNAL.md).
TIERS = ((("Conv", "MatMul"), True), (("Conv", "MatMul"), False))

Gated = tuple[dict[str, dict[str, float]], dict[str, str]]  # pipeline.deployment.gate: (passed paths, refused paths)


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
    cut, _ = text_windows(tok, texts, windows)
    probe = [cut[i] for i in np.unique(np.linspace(0, len(cut) - 1, min(PROBE_WINDOWS, len(cut))).round().astype(int))]
    logits = predict_logits(model.eval(), probe, batch_size=BATCH, pad_id=tok.token_to_id(PAD))
    return Parity(verified, tuple(tuple(w) for w in probe), tuple(tuple(float(x) for x in row) for row in logits),
                  dict(TOLERANCE), MIN_AGREEMENT)


def static_int8(portable: Path, out: Path, partial: Path, calibration: list[list[int]], pad_id: int,
                cfg: QuantizeParams, contract: Contract, on_validation: Callable[[Path], dict[str, float]],
                gated: Callable[[Path], Gated]) -> tuple[dict[str, Gated], dict[str, bool], dict[str, str]]:
    """Static int8 of ``portable`` at ``out``: the first of ``TIERS`` whose graph keeps the student's answers on
    validation (``on_validation``: its comparison with torch there) and passes the gate on every path (``gated``); a
    smaller tier before it that passes on some paths only stays a candidate at ``partial``. Returns ({kind: the gate's
    result}, {kind: its embedding tables int8 a row}, {tier: why it was passed over})."""
    verified: dict[str, Gated] = {}
    rows_int8: dict[str, bool] = {}
    passed_over: dict[str, str] = {}
    for op_types, rows in TIERS:
        quantize_onnx_static_int8(portable, out, calibration, pad_id, per_channel=cfg.per_channel, op_types=op_types)
        if rows and not quantize_onnx_embeddings_int8(out, out):
            continue  # no table big enough (a small vocabulary): the next tier is this graph
        stamp_onnx(out, contract)
        on_val = on_validation(out)
        tier, last = "+".join(op_types) + ("+embedding rows" if rows else ""), (op_types, rows) == TIERS[-1]
        if not keeps_answers(on_val) and not last:
            passed_over[tier] = f"validation: {on_val}"
            continue
        try:
            verified["static"] = gated(out)
        except StageError as err:
            passed_over[tier] = str(err)
            continue
        rows_int8["static"] = rows
        if not verified["static"][1] or last:  # passes on every path (or no larger tier is left)
            break
        if "static_partial" in verified:
            passed_over[tier] = f"refused on {verified.pop('static')[1]}"
            continue
        # it passes on some paths only: the next tier is built, and the two are timed (``fastest_graph``)
        out.replace(partial)
        verified["static_partial"], rows_int8["static_partial"] = verified.pop("static"), rows_int8.pop("static")
    return verified, rows_int8, passed_over


def fastest_graph(graphs: dict[str, Path], verified: dict[str, Gated], probe: Parity, max_length: int, pad_id: int,
                  threads: int) -> tuple[str, dict[str, Timing]]:
    """The kind to deploy: each graph timed on the probe windows on each path it passed, as it serves (static shapes),
    and the fastest, or a smaller one the timing cannot tell from it (``minibert.runtime.smallest_of_fastest``; a
    partial static tier among them ships where it runs as fast on the paths it passed, and a serving host picks among
    those or checks at load). Returns (that kind, each kind's best timing)."""
    timings = {(kind, path): probe_timing(load_engine(graphs[kind], path, threads=threads)
                                          .with_static_shapes(max_length, pad_id), probe, BATCH, pad_id)
               for kind, (passed, _) in verified.items() for path in passed}
    best = {k: min((t for (graph, _), t in timings.items() if graph == k), key=lambda t: t.cost) for k in verified}
    return smallest_of_fastest(best, {k: graphs[k].stat().st_size for k in best}), best
