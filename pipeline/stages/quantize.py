"""quantize: dynamic int8 quantization of the distilled student (torch, Linear layers).

Simplest real form: ``torch.ao`` dynamic quantization (weights int8, activations quantized on
the fly). Reports the size change and the validation accuracy kept, so a quantization that
hurts shows up here before evaluate.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minibert.checkpoint import load_model
from minibert.quantize import model_size_bytes, quantize_dynamic_int8, save_int8
from minibert.tokenizer import load_tokenizer
from pipeline.metrics import classification_metrics
from pipeline.params import Params, load_params
from pipeline.stages.common import finish_stage
from pipeline.stages.finetune import validation
from pipeline.task import load_split, split_path
from pipeline.tracking import stage_run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/quantize/student_int8.pt"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/quantize.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    val_path = split_path(args.data, params.task, "val")
    with stage_run("quantize", params, ["task", "quantize"], [args.student, val_path, args.tokenizer]) as tracker:
        student, _, _ = load_model(args.student)
        int8 = quantize_dynamic_int8(student)
        save_int8(int8, args.out)
        val_logits, labels = validation(load_tokenizer(args.tokenizer), load_split(args.data, params.task, "val"), params.task)
        fp32_acc = classification_metrics(labels, val_logits(student))["accuracy"]
        int8_acc = classification_metrics(labels, val_logits(int8))["accuracy"]
        metrics = {
            "fp32_mb": model_size_bytes(student) / 1e6,
            "int8_mb": model_size_bytes(int8) / 1e6,
            "val_accuracy_fp32": fp32_acc,
            "val_accuracy_int8": int8_acc,
            "val_accuracy_delta": int8_acc - fp32_acc,
        }
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
