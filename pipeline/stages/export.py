"""export: the distilled student to ONNX, verified against torch on the whole test split.

Dynamic batch and sequence axes; parity is checked on every sliding window of the task's test
split of record (all of SST-2 dev by default), in padded, length-sorted batches at batch sizes
1, 8 and 32. The stage fails (and writes no model) when the largest logit
difference exceeds ``export.parity_atol`` or any argmax disagrees.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minibert.batching import pad_batch, sorted_batches
from minibert.checkpoint import load_model
from minibert.export import export_onnx, load_session, parity
from minibert.inference import sliding_windows
from minibert.tokenizer import CLS, SEP, load_tokenizer
from pipeline.io import StageError
from pipeline.params import Params, load_params
from pipeline.stages.common import finish_stage
from pipeline.task import encode_documents, load_split, split_path
from pipeline.tracking import stage_run

PARITY_BATCH_SIZES = (1, 8, 32)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/export/student.onnx"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/export.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    cfg = params.export
    task = params.task
    test_path = split_path(args.data, task, "test")
    with stage_run("export", params, ["task", "export"], [args.student, test_path, args.tokenizer]) as tracker:
        student, _, _ = load_model(args.student)
        tok = load_tokenizer(args.tokenizer)
        documents = encode_documents(tok, load_split(args.data, task, "test")["text"].tolist())
        sequences = [w for doc in documents
                     for w in sliding_windows(doc, task.max_length, task.stride, tok.token_to_id(CLS), tok.token_to_id(SEP))]
        candidate = args.out.with_name(f".candidate.{args.out.name}")
        export_onnx(student, candidate, opset=cfg.opset)
        try:
            session = load_session(candidate, threads=cfg.threads)
            metrics: dict[str, float] = {"opset": cfg.opset}
            for size in PARITY_BATCH_SIZES:
                batches = [pad_batch([sequences[i] for i in idx], 0) for idx in sorted_batches([len(s) for s in sequences], size)]
                result = parity(student, session, batches)
                metrics[f"max_abs_diff_b{size}"] = result["max_abs_diff"]
                metrics[f"argmax_agreement_b{size}"] = result["argmax_agreement"]
                if result["max_abs_diff"] > cfg.parity_atol or result["argmax_agreement"] < 1.0:
                    raise StageError(f"ONNX vs torch at batch {size}: max |diff| {result['max_abs_diff']:.2e} "
                                      f"(limit {cfg.parity_atol:.0e}), argmax agreement {result['argmax_agreement']:.4f}")
            candidate.replace(args.out)
        finally:
            candidate.unlink(missing_ok=True)
        metrics["size_mb"] = args.out.stat().st_size / 1e6
        finish_stage(tracker, metrics, args.metrics, {args.out: "onnx"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
