"""evaluate: every variant on the task's test split of record: quality, size, speed.

Variants: ``baseline`` (TF-IDF + LR), ``teacher`` (fine-tuned, torch, in the precision it was
fine-tuned in, ``train.precision``, as ``teacher_logits`` scores it: bf16 autocast where native
with ``auto``, 1.7x faster than fp32, and most of this stage's time on IMDb), ``student``
(distilled, torch fp32), ``student_int8`` (torch dynamic int8), ``student_onnx`` (portable ONNX,
ONNX Runtime fp32: the chain before OpenVINO) and ``student_onnx_int8`` (static int8 ONNX through
``minibert.runtime`` on the fastest path this host has that the graph's parity record allows, ``openvino`` and
``bf16_inference`` saying which, ``latency_openvino`` and ``latency_bf16_inference`` the path its one-thread copy took
for the latency: the deployed chain). Each model reads texts through the windows its file records
(``minibert.contract``): longer texts (IMDb) through several. Speed is measured end to end from raw text (tokenization included):

- latency: p50 / p95 of ``pipeline.metrics.LATENCY_ROWS`` single texts, one at a time, on one thread;
- throughput: texts/s over the whole split handed over at once, run in length-sorted batches
  of ``BATCH_SIZE`` on ``export.threads`` (the pass that also scores accuracy).

Quality is accuracy and macro-F1, and each class's precision, recall and F1 (reports/per_class.csv);
size is the artifact's file size; calibration is the expected calibration error (ECE) of the
predicted label's probability. Written to metrics/evaluate.json (nested, so ``dvc metrics show``
lists every variant), plots/evaluate.csv (the table), plots/tradeoff.png (accuracy vs latency and
vs size), plots/confusion.png (K x K), plots/calibration.png, reports/predictions.csv (every test
row's predicted class and its probability under every variant, for the report), plots/attention/ (the teacher's attention: every
head for each of the first ``pipeline.attention_plots.PICTURED`` test texts, and per-head statistics over the first
``HEAD_ROWS`` test rows, whose numbers go to reports/attention_heads.csv); all logged to MLflow.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tokenizers import Tokenizer

from minibert.checkpoint import check_tokenizer, load_model, read_contract
from minibert.classifiers import load_classifier
from minibert.contract import Windows
from minibert.precision import resolve_precision
from minibert.quantize import load_int8
from minibert.runtime import RuntimeConfig, TextClassifier
from minibert.tokenizer import load_tokenizer
from pipeline.attention import (
    HEAD_ROWS,
    LEXICON_SIZE,
    head_statistics_picture,
    head_table,
    informative_words,
    sentence_pictures,
)
from pipeline.attention_plots import PICTURED
from pipeline.eval_plots import calibration_chart, confusion_chart
from pipeline.io import atomic_path, write_json
from pipeline.metrics import (
    CALIBRATION_BINS,
    LATENCY_ROWS,
    class_probabilities,
    classification_metrics,
    confusion_matrix,
    per_class,
    reliability,
    single_text_latency,
)
from pipeline.params import Params, load_params
from pipeline.plots import tradeoff_chart
from pipeline.progress import progress
from pipeline.scoring import text_logits
from pipeline.splits import load_split, prepared, split_path
from pipeline.tfidf import load_baseline
from pipeline.tracking import stage_run

Predict = Callable[[list[str]], np.ndarray]  # texts -> (N, K) scores
BATCH_SIZE = 32  # texts a batch in the throughput pass


@dataclass(frozen=True)
class Variant:
    name: str
    path: Path
    predict: Predict  # batched, on export.threads
    predict_one: Predict  # the same model on one thread
    probabilities: bool = False  # predict returns class probabilities (else logits)
    bf16: bool = False  # torch under bf16 autocast
    temperature: float = 1.0  # its logits' divisor before the softmax, as its file records (minibert.calibration)
    engine_path: str = ""  # an exported graph's inference path here (runtime/precision, minibert.engines)
    latency_engine_path: str = ""  # the path its one-thread copy took (``auto`` picks again on one thread)


@dataclass(frozen=True)
class Measured:
    metrics: dict[str, float]
    probabilities: np.ndarray  # (N, K) class probabilities a test row
    reliability: list[dict[str, float]]  # the reliability diagram's bins


def measure(variant: Variant, texts: list[str], labels: np.ndarray, threads: int) -> Measured:
    """Quality, calibration and throughput from one pass over all texts on ``threads``, then batch-1 latency."""
    torch.set_num_threads(threads)
    variant.predict(texts[:BATCH_SIZE])  # warm-up (allocations, lazy init)
    start = time.perf_counter()
    scores = variant.predict(texts)
    seconds = time.perf_counter() - start
    torch.set_num_threads(1)
    latency = single_text_latency(variant.predict_one, texts[:LATENCY_ROWS])
    torch.set_num_threads(threads)
    probabilities = class_probabilities(scores if variant.probabilities else scores / variant.temperature, variant.probabilities)
    bins, ece = reliability(labels, probabilities, CALIBRATION_BINS)
    calibrated = {} if variant.temperature == 1.0 else {
        "temperature": variant.temperature,
        "ece_before_temperature": reliability(labels, class_probabilities(scores, False), CALIBRATION_BINS)[1]}
    metrics = {**classification_metrics(labels, scores), "ece": ece, **calibrated, **latency,
               "throughput_per_s": len(texts) / seconds, "size_mb": variant.path.stat().st_size / 1e6,
               "bf16_autocast": float(variant.bf16),
               **path_flags(variant.engine_path), **path_flags(variant.latency_engine_path, "latency_")}
    return Measured(metrics, probabilities, bins)


def path_flags(engine_path: str, prefix: str = "") -> dict[str, float]:
    """Which inference path (``runtime/precision``) a number was measured on, as metrics: on OpenVINO or not, in bf16
    or not; none for a variant without one (torch, TF-IDF)."""
    if not engine_path:
        return {}
    return {f"{prefix}openvino": float(engine_path.startswith("openvino")),
            f"{prefix}bf16_inference": float(engine_path.endswith("bf16"))}


def onnx_variant(name: str, path: Path, tokenizer: Path, threads: int, runtime: str = "auto") -> Variant:
    """An exported classifier behind the inference runtime, on ``threads`` and on one; it reads texts
    through the windows its file records, on the path ``runtime`` picks on this host (``minibert.runtime``)."""
    def classifier(count: int) -> TextClassifier:
        return TextClassifier.from_files(tokenizer, path, RuntimeConfig(batch_size=BATCH_SIZE, threads=count, runtime=runtime))

    batched, single = classifier(threads), classifier(1)
    return Variant(name, path, batched.logits, single.logits, temperature=batched.temperature,
                   engine_path=batched.path, latency_engine_path=single.path)


def run(variants: list[Variant], test: pd.DataFrame, threads: int) -> dict[str, Measured]:
    texts, labels = test["text"].tolist(), test["label"].to_numpy()
    previous = torch.get_num_threads()
    try:
        return {v.name: measure(v, texts, labels, threads) for v in progress(variants, "evaluate", unit="variant")}
    finally:
        torch.set_num_threads(previous)


def quality_pictures(measured: dict[str, Measured], labels: np.ndarray, classes: tuple[str, ...], confusion: Path,
                     calibration: Path) -> None:
    matrices = {name: confusion_matrix(labels, m.probabilities.argmax(axis=-1), len(classes)) for name, m in measured.items()}
    confusion_chart(matrices, classes, confusion)
    calibration_chart({name: m.reliability for name, m in measured.items()},
                      {name: m.metrics["ece"] for name, m in measured.items()}, calibration)


def class_table(measured: dict[str, Measured], labels: np.ndarray, classes: tuple[str, ...]) -> pd.DataFrame:
    """One row a variant and class: precision, recall, F1 and support on the test split."""
    return pd.DataFrame([{"variant": name, "class": cls, **row}
                         for name, m in measured.items()
                         for cls, row in per_class(labels, m.probabilities.argmax(axis=-1), classes).items()])


def attention_pictures(teacher: torch.nn.Module, tok: Tokenizer, baseline: object, test: pd.DataFrame,
                       windows: Windows, out: Path, heads_csv: Path) -> pd.DataFrame:
    """``out``/text_<i>.png for each of the first ``PICTURED`` test texts and ``out``/heads.png, the head table to ``heads_csv``; returns it."""
    lexicon = informative_words(baseline, LEXICON_SIZE)
    texts = test["text"].tolist()[:HEAD_ROWS]
    table = head_table(teacher, tok, texts, windows.max_length, lexicon)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for i, text in enumerate(texts[:PICTURED]):
            sentence_pictures(teacher, tok, text, windows.max_length, tmp / f"text_{i}.png")
        head_statistics_picture(table, tmp / "heads.png", len(texts))
    with atomic_path(heads_csv) as tmp:
        table.to_csv(tmp, index=False)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--baseline", type=Path, default=Path("models/baseline/model.skops"))
    parser.add_argument("--teacher", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--student", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--int8", type=Path, default=Path("models/quantize/student_int8.pt"))
    parser.add_argument("--onnx", type=Path, default=Path("models/export/student.onnx"))
    parser.add_argument("--onnx-int8", type=Path, default=Path("models/quantize/student_int8.onnx"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/evaluate.json"))
    parser.add_argument("--plot", type=Path, default=Path("plots/evaluate.csv"))
    parser.add_argument("--chart", type=Path, default=Path("plots/tradeoff.png"))
    parser.add_argument("--confusion", type=Path, default=Path("plots/confusion.png"))
    parser.add_argument("--calibration", type=Path, default=Path("plots/calibration.png"))
    parser.add_argument("--attention", type=Path, default=Path("plots/attention"), help="a folder of attention pictures")
    parser.add_argument("--predictions", type=Path, default=Path("reports/predictions.csv"))
    parser.add_argument("--per-class", type=Path, default=Path("reports/per_class.csv"),
                        help="precision, recall, F1 and support of every class under every variant")
    parser.add_argument("--heads", type=Path, default=Path("reports/attention_heads.csv"),
                        help="per-head attention statistics (one row a layer and head)")
    args = parser.parse_args(argv)
    params: Params = load_params()
    threads, classes = params.export.threads, prepared(args.data).labels
    test_path = split_path(args.data, "test")
    inputs = [test_path, args.tokenizer, args.baseline, args.teacher, args.student, args.int8, args.onnx, args.onnx_int8]
    with stage_run("evaluate", params, inputs) as tracker:
        test = load_split(args.data, "test")
        tracker.log_dataset(test, test_path.stem, test_path, context="evaluation")
        tok = load_tokenizer(args.tokenizer)
        baseline = load_baseline(args.baseline)
        for checkpoint in (args.teacher, args.student):
            check_tokenizer(checkpoint, tok, args.tokenizer)
        teacher, _, _ = load_model(args.teacher)
        student = load_classifier(args.student)
        int8 = load_int8(student, args.int8)  # the fp32 student is the skeleton; it stays unmodified

        teacher_reads, student_reads = read_contract(args.teacher).windows, read_contract(args.student).windows

        def torch_variant(name: str, model: torch.nn.Module, path: Path, precision: str = "fp32",
                          reads: Windows = student_reads) -> Variant:
            predict = text_logits(model, tok, reads, BATCH_SIZE, precision)  # the windows the model's file records
            return Variant(name, path, predict, predict, bf16=precision == "bf16")

        teacher_precision = resolve_precision(params.train.precision, torch.device("cpu"))

        variants = [
            Variant("baseline", args.baseline, baseline.predict_proba, baseline.predict_proba, probabilities=True),
            torch_variant("teacher", teacher, args.teacher, teacher_precision, reads=teacher_reads),
            torch_variant("student", student, args.student),
            torch_variant("student_int8", int8, args.int8),
            onnx_variant("student_onnx", args.onnx, args.tokenizer, threads, runtime="onnxruntime"),
            onnx_variant("student_onnx_int8", args.onnx_int8, args.tokenizer, threads),
        ]
        measured = run(variants, test, threads)
        results = {name: m.metrics for name, m in measured.items()}
        labels = test["label"].to_numpy()
        table = pd.DataFrame([{"variant": k, **v} for k, v in results.items()])
        with atomic_path(args.plot) as tmp:
            table.to_csv(tmp, index=False)
        with atomic_path(args.predictions) as tmp:
            columns = {"row": np.arange(len(test)), "label": labels}
            for name, m in measured.items():
                columns.update({f"pred_{name}": m.probabilities.argmax(axis=-1), f"p_{name}": m.probabilities.max(axis=-1)})
            pd.DataFrame(columns).to_csv(tmp, index=False)
        with atomic_path(args.per_class) as tmp:
            class_table(measured, labels, classes).to_csv(tmp, index=False)
        tradeoff_chart(table, args.chart)
        quality_pictures(measured, labels, classes, args.confusion, args.calibration)
        heads = attention_pictures(teacher, tok, baseline, test, teacher_reads, args.attention, args.heads)
        write_json(results, args.metrics)  # last: DVC sees the stage done only when everything is written
        tracker.log_metrics({f"{name}.{key}": value for name, row in results.items() for key, value in row.items()})
        tracker.log_metrics({f"attention.L{r.layer}H{r.head}.{k}": float(getattr(r, k))
                             for r in heads.itertuples() for k in heads.columns if k not in ("layer", "head")})
        for path in (args.metrics, args.plot, args.chart, args.confusion, args.calibration, args.predictions, args.per_class,
                     args.heads):
            tracker.log_artifact(path)
        tracker.log_artifact(args.attention, "attention")


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
