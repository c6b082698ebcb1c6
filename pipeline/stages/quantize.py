"""quantize: the deployed graph, int8 of the student gated on every inference path and timed; and torch's dynamic
int8 of it.

Two int8 graphs are built and checked: calibrated static int8 of the portable graph (ONNX Runtime's QDQ format,
activation ranges from ``quantize.calibration_texts`` training texts read through the student's windows,
``minibert.quantize.quantize_onnx_static_int8``; its operator set the first of ``TIERS`` that keeps the student's
answers), which ONNX Runtime and OpenVINO both run, and ONNX Runtime's dynamic int8 of the fused graph (its fused
int8 attention, which OpenVINO cannot read). Each reads the test split of record on every inference path this
host has and is held against the torch fp32 student (``pipeline.deployment``: argmax agreement, accuracy, the
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
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from minibert.calibration import fit_temperature, nll
from minibert.checkpoint import check_tokenizer, read_contract
from minibert.classifiers import load_classifier
from minibert.contract import stamp_onnx, stamp_parity
from minibert.engines import PORTABLE_PATH, load_engine
from minibert.quantize import (
    model_size_bytes,
    quantize_dynamic_int8,
    quantize_onnx_embeddings_int8,
    quantize_onnx_int8,
    quantize_onnx_static_int8,
    save_int8,
)
from minibert.runtime import probe_timing, smallest_of_fastest, softmax
from minibert.tokenizer import CLS, PAD, SEP, load_tokenizer
from minibert.windows import document_windows
from pipeline.deployment import BATCH, compare, gate, keeps_answers, parity_record
from pipeline.io import StageError
from pipeline.metrics import CALIBRATION_BINS, classification_metrics, reliability
from pipeline.params import Params, load_params
from pipeline.scoring import text_logits, validation
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import encode_documents
from pipeline.tracking import stage_run

# static int8's tiers, tried in turn: (the operator types it quantises, whether the embedding tables go to int8 a row,
# weight-only: minibert.quantize.quantize_onnx_embeddings_int8). The first whose graph keeps the student's answers on
# validation (pipeline.deployment.keeps_answers) and passes the gate on test on every path is a candidate, and a
# smaller one before it that passes on some paths only is one too (``static_partial``), timed on those. The
# word-CNN's embeddings are most of its bytes: by row they cost it no answer, where ONNX Runtime's Gather
# quantisation (one scale a table, activations too) cost it 0.3 points of SST-2 (benchmarks/JOURNAL.md).
TIERS = ((("Conv", "MatMul"), True), (("Conv", "MatMul"), False))


def calibration_windows(tok, texts: list[str], windows) -> list[list[int]]:  # noqa: ANN001 - tokenizer, Windows
    """The token-id windows of ``texts`` as the student reads them."""
    cut, _ = document_windows(encode_documents(tok, texts), windows.max_length, windows.stride, tok.token_to_id(CLS),
                              tok.token_to_id(SEP))
    return cut


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
    cfg, threads = params.quantize, params.export.threads
    paths = {split: split_path(args.data, split) for split in ("train", "val", "test")}
    with stage_run("quantize", params, [args.student, args.portable, args.fused, *paths.values(), args.tokenizer]) as tracker:
        tok = load_tokenizer(args.tokenizer)
        pad_id = tok.token_to_id(PAD)
        check_tokenizer(args.student, tok, args.tokenizer)
        student = load_classifier(args.student).eval()
        contract = read_contract(args.student)
        int8 = quantize_dynamic_int8(student)
        train = load_split(args.data, "train")["text"]
        sample = train.sample(n=min(cfg.calibration_texts, len(train)), random_state=params.train.seed).tolist()
        candidates = {kind: args.onnx_out.with_name(f".candidate.{kind}.{args.onnx_out.name}")
                      for kind in ("static", "static_partial", "dynamic", "fp32")}
        val_logits, val_labels, _ = validation(tok, load_split(args.data, "val"), contract.windows)

        def engine_logits(graph: Path) -> np.ndarray:
            engine = load_engine(graph, PORTABLE_PATH, threads=threads)
            return val_logits(lambda ids, mask: torch.from_numpy(engine(ids, mask)))

        try:
            student_val = val_logits(student)
            test = load_split(args.data, "test")
            texts, labels = test["text"].tolist(), test["label"].to_numpy()
            with torch.inference_mode():
                reference = text_logits(student, tok, contract.windows, batch_size=32)(texts)
            probe = parity_record(student, tok, texts, contract.windows, {})
            # static int8 of the portable graph: the smallest tier that keeps the student's answers on validation and
            # passes the gate on every path; a smaller one that passes on some paths only stays a candidate beside it
            calibration = calibration_windows(tok, sample, contract.windows)
            static = candidates["static"]
            passed_over: dict[str, str] = {}
            verified: dict[str, tuple[dict, dict]] = {}
            tiers: dict[str, tuple[bool, dict[str, float]]] = {}  # static kind -> (embedding rows int8, on validation)
            for op_types, rows in TIERS:
                quantize_onnx_static_int8(args.portable, static, calibration, pad_id,
                                          per_channel=cfg.per_channel, op_types=op_types)
                if rows and not quantize_onnx_embeddings_int8(static, static):
                    continue  # no table big enough (a small vocabulary): the next tier is this graph
                stamp_onnx(static, contract)
                on_val = compare(engine_logits(static), student_val, val_labels)
                tier, last = "+".join(op_types) + ("+embedding rows" if rows else ""), (op_types, rows) == TIERS[-1]
                if not keeps_answers(on_val) and not last:
                    passed_over[tier] = f"validation: {on_val}"
                    continue
                try:
                    verified["static"] = gate(static, tok, texts, labels, reference, threads)
                except StageError as err:
                    passed_over[tier] = str(err)
                    continue
                tiers["static"] = (rows, on_val)
                if not verified["static"][1] or last:  # passes on every path (or no larger tier is left)
                    break
                if "static_partial" in verified:
                    passed_over[tier] = f"refused on {verified.pop('static')[1]}"
                    continue
                # it passes on some paths only: the next tier is built, and the two are timed (below)
                static.replace(candidates["static_partial"])
                verified["static_partial"], tiers["static_partial"] = verified.pop("static"), tiers.pop("static")
            # dynamic int8 of the fused graph: ONNX Runtime's fused int8 attention (QAttention), which OpenVINO cannot read
            quantize_onnx_int8(args.fused, candidates["dynamic"], per_channel=cfg.per_channel)
            stamp_onnx(candidates["dynamic"], contract)
            try:
                verified["dynamic"] = gate(candidates["dynamic"], tok, texts, labels, reference, threads)
            except StageError as err:
                passed_over["dynamic"] = str(err)
            if not verified:  # no int8 graph keeps the answers (a model near ties on a small test split): fp32 is deployed
                shutil.copyfile(args.portable, candidates["fp32"])
                verified["fp32"] = gate(candidates["fp32"], tok, texts, labels, reference, threads)
            # the faster graph here: each on each path it passed, as it serves, timed on the probe windows
            timings = {(kind, path): probe_timing(load_engine(candidates[kind], path, threads=threads)
                                                  .with_static_shapes(contract.windows.max_length, pad_id),
                                                  probe, BATCH, pad_id)
                       for kind, (passed, _) in verified.items() for path in passed}
            best = {k: min((t for (graph, _), t in timings.items() if graph == k), key=lambda t: t.cost) for k in verified}
            # the fastest graph, or a smaller one the timing cannot tell from it (a partial static tier among them: it
            # ships where it runs as fast on the paths it passed; a serving host picks among those, or checks at load)
            kind = smallest_of_fastest(best, {k: candidates[k].stat().st_size for k in best})
            chosen, (paths_passed, refused) = candidates[kind], verified[kind]
            rows, on_val = tiers.get(kind, (False, on_val))
            logits = {"fp32": student_val, "int8": val_logits(int8), "onnx_fp32": engine_logits(args.portable),
                      "onnx_int8": engine_logits(chosen)}
            # the deployed graph's probabilities calibrated on validation
            temperature = fit_temperature(logits["onnx_int8"], val_labels)
            stamp_onnx(chosen, replace(contract, temperature=temperature))
            stamp_parity(chosen, replace(probe, verified=paths_passed, refused=refused))
            save_int8(int8, args.out)
            chosen.replace(args.onnx_out)
        finally:
            for candidate in candidates.values():
                candidate.unlink(missing_ok=True)
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
            "onnx_fp32_mb": args.portable.stat().st_size / 1e6,
            "onnx_int8_mb": args.onnx_out.stat().st_size / 1e6,
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
            "int8_embeddings": float(kind.startswith("static") and rows),  # the deployed graph's embedding tables in int8 a row
            "int8_passed_over": passed_over,  # the int8 graphs refused (static tiers, dynamic), and why
            **{f"val_int8_{key}": value for key, value in on_val.items()},  # the deployed tier's, against torch
            "paths_verified": float(len(paths_passed)),
            "refused_paths": refused,  # path -> why (its numbers, or why it does not load)
            **{f"test_{path.replace('/', '_')}_{key}": value for path, result in paths_passed.items()
               for key, value in result.items()},
        }
        finish_stage(tracker, metrics, args.metrics, {args.onnx_out: "onnx"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
