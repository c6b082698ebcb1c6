"""export: the distilled student to ONNX, twice, each verified against torch on the test split.

``student.onnx`` is the portable graph (standard operators, any ONNX runtime);
``student_fused.onnx`` is the same model for ONNX Runtime, attention exported as fused
``Attention`` nodes (``minibert.ort_fusion``) and, with ``export.ort_optimizer``, ORT's
transformer optimiser run over it (SkipLayerNorm, BiasGelu). It is the graph ``quantize`` turns
into int8. A word-CNN student (``distill.student_kind: word_cnn``) has no attention to fuse: its
``student_fused.onnx`` is the portable graph again. Both have dynamic batch and sequence axes and
carry the student's contract in their metadata (``minibert.contract``: windows, labels, vocabulary),
which is also how the test texts are cut here. Parity is checked on the sliding windows
of the task's test split of record (all of SST-2 dev; ``PARITY_ROWS`` evenly spaced
windows of a longer split such as IMDb's), in padded, length-sorted batches at batch sizes 1, 8
and 32 (so at every length the split has). The
stage fails, and writes no model, when the largest logit difference exceeds
``PARITY_ATOL`` or any argmax disagrees.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from torch import nn

from minibert.batching import pad_batch, sorted_batches
from minibert.checkpoint import check_tokenizer, read_contract, read_metadata
from minibert.classifiers import load_classifier
from minibert.config import ModelConfig
from minibert.contract import Contract, stamp_onnx
from minibert.engines import load_session
from minibert.export import export_onnx, parity
from minibert.model import SequenceClassifier
from minibert.ort_fusion import fused_operator_counts, optimize_for_ort
from minibert.tokenizer import load_tokenizer
from pipeline.io import StageError
from pipeline.params import ExportParams, Params, load_params
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import text_windows
from pipeline.tracking import stage_run

PARITY_BATCH_SIZES = (1, 8, 32)
PARITY_ROWS = 4096  # test windows checked against torch, evenly spaced
PARITY_ATOL = 1e-4  # the largest fp32 logit difference from torch allowed
OPSET = 18  # the TorchScript exporter's range with LayerNormalization is 17..20


def check_parity(student: nn.Module, path: Path, sequences: list[list[int]], cfg: ExportParams,
                 prefix: str) -> dict[str, float]:
    """Per-batch-size parity metrics for the ONNX file at ``path``; raises StageError past the limits."""
    session = load_session(path, threads=cfg.threads)
    metrics: dict[str, float] = {}
    for size in PARITY_BATCH_SIZES:
        batches = [pad_batch([sequences[i] for i in idx], 0) for idx in sorted_batches([len(s) for s in sequences], size)]
        result = parity(student, session, batches)
        metrics[f"{prefix}max_abs_diff_b{size}"] = result["max_abs_diff"]
        metrics[f"{prefix}argmax_agreement_b{size}"] = result["argmax_agreement"]
        if result["max_abs_diff"] > PARITY_ATOL or result["argmax_agreement"] < 1.0:
            raise StageError(f"{path.name} vs torch at batch {size}: max |diff| {result['max_abs_diff']:.2e} "
                             f"(limit {PARITY_ATOL:.0e}), argmax agreement {result['argmax_agreement']:.4f}")
    return metrics


def parity_sample(windows: list[list[int]], rows: int | None) -> list[list[int]]:
    """``rows`` windows evenly spaced through ``windows`` (all of them when there are no more, or
    ``rows`` is None): IMDb's test split has about 100 k windows, and checking each at three
    batch sizes through two graphs would take longer than the rest of the pipeline."""
    if rows is None or len(windows) <= rows:
        return windows
    return [windows[i] for i in np.unique(np.linspace(0, len(windows) - 1, rows).round().astype(np.int64))]


Export = tuple[Path, Callable[[Path], None], Callable[[Path], dict[str, float]]]


def verified_exports(exports: Sequence[Export]) -> dict[str, float]:
    """Write each (output, writer, check) candidate beside its output and check it; only when every
    check passes move them all into place, so a refused graph never leaves a new one beside an old one."""
    candidates = [out.with_name(f".candidate.{out.name}") for out, _, _ in exports]
    metrics: dict[str, float] = {}
    try:
        for candidate, (_, write, check) in zip(candidates, exports, strict=True):
            write(candidate)
            metrics |= check(candidate)
        for candidate, (out, _, _) in zip(candidates, exports, strict=True):
            candidate.replace(out)
    finally:
        for candidate in candidates:
            candidate.unlink(missing_ok=True)
    return metrics


def run(cfg: ExportParams, student: nn.Module, contract: Contract, model_cfg: ModelConfig | None, tok: Tokenizer,
        test_texts: list[str], out: Path, fused_out: Path) -> dict[str, float]:
    """Write the portable graph to ``out`` and the fused one to ``fused_out``, both stamped with ``contract``, once both
    match ``student`` on the test texts' windows (``verified_exports``); the metrics. ``model_cfg``: a transformer
    student's shape (its attention is fused), None for a word-CNN (its fused graph is the portable one)."""
    cut, _ = text_windows(tok, test_texts, contract.windows)
    sequences = parity_sample(cut, PARITY_ROWS)
    metrics: dict[str, float] = {"opset": OPSET, "windows": len(cut), "parity_windows": len(sequences)}

    def write_portable(path: Path) -> None:
        export_onnx(student, path, opset=OPSET)
        stamp_onnx(path, contract)

    def write_fused(path: Path) -> None:
        if model_cfg is None:  # a word-CNN student: no attention to fuse
            write_portable(path)
            return
        # rotary positions act inside attention, which the fused kernel cannot express
        export_onnx(student, path, opset=OPSET, fused_attention=model_cfg.position != "rotary")
        if cfg.ort_optimizer:
            optimize_for_ort(path, path, model_cfg.num_heads, model_cfg.hidden_size)
        stamp_onnx(path, contract)

    metrics |= verified_exports([
        (out, write_portable, lambda p: check_parity(student, p, sequences, cfg, "")),
        (fused_out, write_fused, lambda p: check_parity(student, p, sequences, cfg, "fused_")),
    ])
    counts = fused_operator_counts(fused_out)
    metrics |= {f"fused_{op}_nodes": counts.get(op, 0) for op in ("Attention", "SkipLayerNormalization", "BiasGelu")}
    metrics["size_mb"] = out.stat().st_size / 1e6
    metrics["fused_size_mb"] = fused_out.stat().st_size / 1e6
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/export/student.onnx"))
    parser.add_argument("--fused-out", type=Path, default=Path("models/export/student_fused.onnx"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/export.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    test_path = split_path(args.data, "test")
    with stage_run("export", params, [args.student, test_path, args.tokenizer]) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(args.student, tok, args.tokenizer)
        student = load_classifier(args.student)
        model_cfg = read_metadata(args.student)[1] if isinstance(student, SequenceClassifier) else None
        # the windows and labels the student was trained with
        metrics = run(params.export, student, read_contract(args.student), model_cfg, tok,
                      load_split(args.data, "test")["text"].tolist(), args.out, args.fused_out)
        finish_stage(tracker, metrics, args.metrics, {args.out: "onnx", args.fused_out: "onnx"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
