"""quantize: the deployed graph, int8 of the student gated on every inference path and timed; and torch's dynamic
int8 of it.

Two int8 graphs are built and checked: calibrated static int8 of the portable graph (ONNX Runtime's QDQ format,
activation ranges from ``quantize.calibration_texts`` training texts read through the student's windows,
``minibert.quantize.quantize_onnx_static_int8``; its operator set the first of ``pipeline.deployment.TIERS`` that
keeps the student's answers), which ONNX Runtime and OpenVINO both run, and ONNX Runtime's dynamic int8 of the
fused graph (its fused int8 attention, which OpenVINO cannot read). Each reads the test split of record on every
inference path this host has and is held against the torch fp32 student (``pipeline.deployment``: argmax agreement, accuracy, the
logit tolerance of its precision). Of those that pass on the portable path, the one that runs the probe windows
fastest here on a path it passed (in batches and one window a call), or a smaller one the timing cannot tell from it
(``minibert.runtime.smallest_of_fastest``), is deployed as ``student_int8.onnx`` (the word-CNN: static int8 on
OpenVINO; a transformer student: the fused dynamic int8 on ONNX Runtime, benchmarks/RESULTS.md). Where neither int8 graph passes
(a model whose logits sit near ties, on a small test split), the portable fp32 graph is deployed, checked the same
way (``deployed_fp32`` and the refusals' numbers in the metrics); the stage refuses, writing nothing, only when that
fails too. The deployed graph carries the student's contract (windows,
labels: ``minibert.contract``), its parity record (the paths that passed with their numbers, the paths the gate
refused, which no host serves it on, and the probe), and the temperature that calibrates its probabilities on the
validation split (``minibert.calibration``; ECE and NLL before and after in the metrics).
``student_int8.pt``: torch dynamic quantization of the Linear layers (``torch.ao``).
Reports sizes, and validation accuracy of each against its fp32 source, so a quantization that hurts shows up
here before evaluate.

``run`` builds, checks and picks in a working folder and returns the deployed graph there; ``main`` reads the files
and params, and moves what ``run`` returns into place only once every check has passed.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tokenizers import Tokenizer
from torch import nn

from minibert.calibration import fit_temperature, nll
from minibert.checkpoint import check_tokenizer, read_contract
from minibert.classifiers import load_classifier
from minibert.contract import Contract, stamp_onnx, stamp_parity
from minibert.engines import PORTABLE_PATH, load_engine
from minibert.quantize import model_size_bytes, quantize_dynamic_int8, quantize_onnx_int8, save_int8
from minibert.runtime import softmax
from minibert.tokenizer import PAD, load_tokenizer
from pipeline.deployment import Gated, compare, fastest_graph, gate, parity_record, static_int8
from pipeline.io import StageError
from pipeline.metrics import CALIBRATION_BINS, classification_metrics, reliability
from pipeline.params import Params, QuantizeParams, load_params
from pipeline.scoring import text_logits, validation
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import text_windows
from pipeline.tracking import stage_run

KINDS = ("static", "static_partial", "dynamic", "fp32")  # the candidate graphs, each a file in run's working folder


@dataclass(frozen=True)
class Inputs:
    """What quantize reads, loaded: the torch fp32 student with its tokenizer and contract, the prepared splits
    (``train`` for calibration, ``val`` for the tiers and the temperature, ``test``: the split of record the gate
    reads), and export's portable and fused graphs."""

    tok: Tokenizer
    student: nn.Module
    contract: Contract
    train: pd.DataFrame
    val: pd.DataFrame
    test: pd.DataFrame
    portable: Path
    fused: Path


@dataclass(frozen=True)
class Outputs:
    graph: Path  # the deployed graph in run's working folder, stamped with the contract, parity and temperature
    int8: nn.Module  # torch dynamic int8 of the student (its Linear layers)
    metrics: dict[str, Any]


def run(cfg: QuantizeParams, inputs: Inputs, workdir: Path, threads: int, seed: int) -> Outputs:
    """Build the int8 candidates in ``workdir``, gate each against the torch fp32 student on the test split on every
    path this host has, and return the fastest that passed (the portable fp32 graph where none did), stamped; the
    torch int8 student; and the metrics. StageError, with the numbers, when even the fp32 graph fails the gate."""
    tok, contract, student = inputs.tok, inputs.contract, inputs.student.eval()
    pad_id = tok.token_to_id(PAD)
    graphs = {kind: workdir / f"{kind}.onnx" for kind in KINDS}
    int8 = quantize_dynamic_int8(student)
    sample = inputs.train["text"].sample(n=min(cfg.calibration_texts, len(inputs.train)), random_state=seed).tolist()
    val_logits, val_labels, _ = validation(tok, inputs.val, contract.windows)

    scored: dict[str, np.ndarray] = {}  # a graph's validation logits by its bytes' digest: each graph is scored once

    def engine_logits(graph: Path) -> np.ndarray:
        digest = hashlib.sha256(graph.read_bytes()).hexdigest()
        if digest not in scored:
            engine = load_engine(graph, PORTABLE_PATH, threads=threads)
            scored[digest] = val_logits(lambda ids, mask: torch.from_numpy(engine(ids, mask)))
        return scored[digest]

    student_val = val_logits(student)
    texts, labels = inputs.test["text"].tolist(), inputs.test["label"].to_numpy()
    with torch.inference_mode():
        reference = text_logits(student, tok, contract.windows, batch_size=32)(texts)
    probe = parity_record(student, tok, texts, contract.windows, {})

    def gated(graph: Path) -> Gated:
        return gate(graph, tok, texts, labels, reference, threads)

    # static int8 of the portable graph: the smallest tier that keeps the student's answers on validation and passes
    # the gate on every path; a smaller one that passes on some paths only stays a candidate beside it
    verified, rows_int8, passed_over = static_int8(
        inputs.portable, graphs["static"], graphs["static_partial"], text_windows(tok, sample, contract.windows)[0],
        pad_id, cfg, contract, lambda graph: compare(engine_logits(graph), student_val, val_labels), gated)
    # dynamic int8 of the fused graph: ONNX Runtime's fused int8 attention (QAttention), which OpenVINO cannot read
    quantize_onnx_int8(inputs.fused, graphs["dynamic"], per_channel=cfg.per_channel)
    stamp_onnx(graphs["dynamic"], contract)
    try:
        verified["dynamic"] = gated(graphs["dynamic"])
    except StageError as err:
        passed_over["dynamic"] = str(err)
    if not verified:  # no int8 graph keeps the answers (a model near ties on a small test split): fp32 is deployed
        shutil.copyfile(inputs.portable, graphs["fp32"])
        verified["fp32"] = gated(graphs["fp32"])
    kind, best = fastest_graph(graphs, verified, probe, contract.windows.max_length, pad_id, threads)
    chosen, (paths_passed, refused) = graphs[kind], verified[kind]
    logits = {"fp32": student_val, "int8": val_logits(int8), "onnx_fp32": engine_logits(inputs.portable),
              "onnx_int8": engine_logits(chosen)}
    on_val = compare(logits["onnx_int8"], student_val, val_labels)  # the deployed graph against torch on validation
    # the deployed graph's probabilities calibrated on validation
    temperature = fit_temperature(logits["onnx_int8"], val_labels)
    stamp_onnx(chosen, replace(contract, temperature=temperature))
    stamp_parity(chosen, replace(probe, verified=paths_passed, refused=refused))
    accuracy = {name: classification_metrics(val_labels, scores)["accuracy"] for name, scores in logits.items()}
    calibrated = {when: reliability(val_labels, softmax(logits["onnx_int8"] / t), CALIBRATION_BINS)[1]
                  for when, t in (("before", 1.0), ("after", temperature))}
    metrics = {
        "temperature": temperature,
        "val_ece_before_temperature": calibrated["before"], "val_ece": calibrated["after"],
        "val_nll_before_temperature": nll(logits["onnx_int8"], val_labels),
        "val_nll": nll(logits["onnx_int8"], val_labels, temperature),
        "fp32_mb": model_size_bytes(student) / 1e6,
        "int8_mb": model_size_bytes(int8) / 1e6,
        "onnx_fp32_mb": inputs.portable.stat().st_size / 1e6,
        "onnx_int8_mb": chosen.stat().st_size / 1e6,
        **{f"val_accuracy_{name}": value for name, value in accuracy.items()},
        "val_accuracy_delta": accuracy["int8"] - accuracy["fp32"],
        "val_accuracy_delta_onnx": accuracy["onnx_int8"] - accuracy["onnx_fp32"],
        "calibration_texts": len(sample),
        "deployed_static": float(kind.startswith("static")),  # static int8 of the portable graph
        "deployed_dynamic": float(kind == "dynamic"),  # ORT's dynamic int8 of the fused graph
        "deployed_fp32": float(kind == "fp32"),  # no int8 graph passed the gate: the portable fp32 graph
        # each graph on its fastest verified path here: its probe windows in batches, and one window a call
        **{f"probe_ms_{k}": 1000 * t.batch_s for k, t in best.items()},
        **{f"probe_single_ms_{k}": 1000 * t.single_s for k, t in best.items()},
        "deployed_partial": float(kind == "static_partial"),  # a smaller static tier, passed on part of the paths
        "int8_embeddings": float(rows_int8.get(kind, False)),  # the deployed graph's embedding tables in int8 a row
        "int8_passed_over": passed_over,  # the int8 graphs refused (static tiers, dynamic), and why
        **{f"val_int8_{key}": value for key, value in on_val.items()},  # the deployed graph's, against torch
        "paths_verified": float(len(paths_passed)),
        "refused_paths": refused,  # path -> why (its numbers, or why it does not load)
        **{f"test_{path.replace('/', '_')}_{key}": value for path, result in paths_passed.items()
           for key, value in result.items()},
    }
    return Outputs(chosen, int8, metrics)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--portable", type=Path, default=Path("models/export/student.onnx"))
    parser.add_argument("--fused", type=Path, default=Path("models/export/student_fused.onnx"))
    parser.add_argument("--out", type=Path, default=Path("models/quantize/student_int8.pt"))
    parser.add_argument("--onnx-out", type=Path, default=Path("models/quantize/student_int8.onnx"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/quantize.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    paths = {split: split_path(args.data, split) for split in ("train", "val", "test")}
    with stage_run("quantize", params, [args.student, args.portable, args.fused, *paths.values(), args.tokenizer]) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(args.student, tok, args.tokenizer)
        inputs = Inputs(tok, load_classifier(args.student), read_contract(args.student),
                        *(load_split(args.data, split) for split in ("train", "val", "test")), args.portable, args.fused)
        args.onnx_out.parent.mkdir(parents=True, exist_ok=True)
        # the candidates beside the output (one file system, so the deployed one moves into place whole)
        with tempfile.TemporaryDirectory(prefix=".quantize.", dir=args.onnx_out.parent) as workdir:
            outputs = run(params.quantize, inputs, Path(workdir), params.export.threads, params.train.seed)
            save_int8(outputs.int8, args.out)
            outputs.graph.replace(args.onnx_out)
        finish_stage(tracker, outputs.metrics, args.metrics, {args.onnx_out: "onnx"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
