"""quantize: dynamic int8 versions of the distilled student, in torch and in ONNX Runtime.

``student_int8.pt``: torch dynamic quantization of the Linear layers (``torch.ao``).
``student_int8.onnx``: ONNX Runtime dynamic quantization of the fused graph from ``export``
(MatMul, Attention and embedding weights to int8, Conv too with ``quantize.conv``;
``quantize.reduce_range`` / ``per_channel`` as set); the deployed chain, stamped with the fused graph's
contract (windows, labels: ``minibert.contract``) and the temperature that calibrates its probabilities on the
validation split (``minibert.calibration``; ECE and NLL before and after in the metrics). Reports sizes and validation accuracy of each against
its fp32 source, read through the student's own windows, so a quantization that hurts shows up here
before evaluate.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from minibert.calibration import fit_temperature, nll
from minibert.checkpoint import check_tokenizer
from minibert.classifiers import load_classifier
from minibert.contract import read_onnx_contract, stamp_onnx
from minibert.export import load_session, session_callable
from minibert.quantize import model_size_bytes, quantize_dynamic_int8, quantize_onnx_int8, save_int8
from minibert.runtime import softmax
from minibert.tokenizer import load_tokenizer
from pipeline.metrics import CALIBRATION_BINS, classification_metrics, reliability
from pipeline.params import Params, load_params
from pipeline.scoring import validation
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.tracking import stage_run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--fused", type=Path, default=Path("models/export/student_fused.onnx"))
    parser.add_argument("--out", type=Path, default=Path("models/quantize/student_int8.pt"))
    parser.add_argument("--onnx-out", type=Path, default=Path("models/quantize/student_int8.onnx"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/quantize.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    cfg = params.quantize
    val_path = split_path(args.data, "val")
    inputs = [args.student, args.fused, val_path, args.tokenizer]
    with stage_run("quantize", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(args.student, tok, args.tokenizer)
        student = load_classifier(args.student)
        int8 = quantize_dynamic_int8(student)
        save_int8(int8, args.out)
        quantize_onnx_int8(args.fused, args.onnx_out, reduce_range=cfg.reduce_range, per_channel=cfg.per_channel,
                           conv=cfg.conv)
        contract = read_onnx_contract(args.fused)
        val_logits, labels, _ = validation(tok, load_split(args.data, "val"), contract.windows)
        threads = params.export.threads
        logits = {name: val_logits(model) for name, model in (
            ("fp32", student), ("int8", int8),
            ("onnx_fp32", session_callable(load_session(args.fused, threads=threads))),
            ("onnx_int8", session_callable(load_session(args.onnx_out, threads=threads))))}
        accuracy = {name: classification_metrics(labels, scores)["accuracy"] for name, scores in logits.items()}
        # the deployed graph reads texts as the graph it was made from, its probabilities calibrated on validation
        temperature = fit_temperature(logits["onnx_int8"], labels)
        stamp_onnx(args.onnx_out, replace(contract, temperature=temperature))
        calibrated = {when: reliability(labels, softmax(logits["onnx_int8"] / t), CALIBRATION_BINS)[1]
                      for when, t in (("before", 1.0), ("after", temperature))}
        metrics = {
            "temperature": temperature,
            "val_ece_before_temperature": calibrated["before"], "val_ece": calibrated["after"],
            "val_nll_before_temperature": nll(logits["onnx_int8"], labels), "val_nll": nll(logits["onnx_int8"], labels, temperature),
            "fp32_mb": model_size_bytes(student) / 1e6,
            "int8_mb": model_size_bytes(int8) / 1e6,
            "onnx_fp32_mb": args.fused.stat().st_size / 1e6,
            "onnx_int8_mb": args.onnx_out.stat().st_size / 1e6,
            **{f"val_accuracy_{name}": value for name, value in accuracy.items()},
            "val_accuracy_delta": accuracy["int8"] - accuracy["fp32"],
            "val_accuracy_delta_onnx": accuracy["onnx_int8"] - accuracy["onnx_fp32"],
        }
        finish_stage(tracker, metrics, args.metrics, {args.onnx_out: "onnx"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
