"""report: one page a pipeline run, reports/summary.md and a self-contained reports/summary.html.

What the run measured (every variant's quality, calibration, speed and size beside the TF-IDF
baseline), how training went (curves of pretraining, fine-tuning and distillation), the
evaluation pictures (accuracy vs latency and size, confusion matrices, reliability diagram), what
the teacher attends to (every head for the first test texts, per-head statistics), and example
predictions of the deployed model: its most confident mistakes, its most confident right
answers and the rows it is least sure of. Both files, and the pictures, are logged to MLflow.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.attention_plots import PICTURED, STATISTIC_TITLES
from pipeline.document import Block, Figure, Heading, Table, Text, to_html, to_markdown
from pipeline.io import DataError, atomic_path, read_json
from pipeline.model_card import DEPLOYED
from pipeline.params import Params, load_params
from pipeline.splits import Prepared, load_split, prepared, split_path

VARIANTS = {
    "baseline": "TF-IDF + logistic regression",
    "teacher": "fine-tuned encoder, torch {precision}",
    "student": "distilled student, torch {precision}",
    "student_int8": "student, torch dynamic int8",
    "student_onnx": "student, ONNX Runtime fp32",
    "student_onnx_int8": "student, fused int8 ONNX (deployed)",
}
TEXT_CHARS = 240  # long reviews are cut in the example tables
EXAMPLES = 10  # rows a list: most confident mistakes, most confident right, least sure


def _num(metrics: dict[str, Any], key: str, spec: str, scale: float = 1.0) -> str:
    value = metrics.get(key)
    return "n/a" if not isinstance(value, (int, float)) else format(scale * value, spec)


def describe(name: str, metrics: dict[str, float]) -> str:
    """The variant's one-line description; a torch variant names the precision it was scored in."""
    precision = "bf16 autocast" if metrics.get("bf16_autocast") else "fp32"
    return VARIANTS.get(name, "").replace("{precision}", precision)


def results_table(evaluation: dict[str, dict[str, float]]) -> Table:
    base = evaluation["baseline"]["accuracy"]
    order = [v for v in VARIANTS if v in evaluation] + [v for v in evaluation if v not in VARIANTS]
    rows = tuple(
        (name, describe(name, m), _num(m, "accuracy", ".2f", 100), _num(m, "macro_f1", ".2f", 100), _num(m, "ece", ".3f"),
         _num(m, "p50_ms", ".2f"), _num(m, "p95_ms", ".2f"), _num(m, "throughput_per_s", ".0f"), _num(m, "size_mb", ".2f"),
         f"{100 * (m['accuracy'] - base):+.2f}")
        for name, m in ((n, evaluation[n]) for n in order))
    return Table(("variant", "what", "accuracy %", "macro-F1 %", "ECE", "p50 ms", "p95 ms", "texts/s", "size MB",
                  "vs baseline (points)"), rows)


def headline(evaluation: dict[str, dict[str, float]], task: str) -> Text:
    deployed, teacher, base = evaluation[DEPLOYED], evaluation["teacher"], evaluation["baseline"]
    return Text(
        f"The deployed model ({DEPLOYED}) scores {100 * deployed['accuracy']:.2f} % on the {task} test split of record, "
        f"{100 * (deployed['accuracy'] - base['accuracy']):+.2f} points against the TF-IDF + logistic-regression baseline "
        f"({100 * base['accuracy']:.2f} %). The teacher it was distilled from scores {100 * teacher['accuracy']:.2f} %; "
        f"the deployed model keeps {100 * deployed['accuracy'] / max(teacher['accuracy'], 1e-9):.1f} % of that at "
        f"{deployed['size_mb']:.2f} MB against {teacher['size_mb']:.2f} MB, and answers one text in "
        f"{deployed['p50_ms']:.2f} ms (p50) against {teacher['p50_ms']:.2f} ms.")


def training_table(stages: dict[str, dict[str, Any]]) -> Table:
    pretrain, finetune, distill = stages.get("pretrain", {}), stages.get("finetune", {}), stages.get("distill", {})
    rows = (
        ("pretrain", f"held-out masked-token accuracy {_num(pretrain, 'mlm_accuracy', '.2f', 100)} %, "
                     f"perplexity {_num(pretrain, 'mlm_perplexity', '.1f')}",
         _num(pretrain, "steps", ".0f"), _num(pretrain, "train_seconds", ".0f")),
        ("finetune", f"validation accuracy {_num(finetune, 'val_accuracy', '.2f', 100)} % (best at step "
                     f"{_num(finetune, 'best_step', '.0f')})", _num(finetune, "steps", ".0f"),
         _num(finetune, "train_seconds", ".0f")),
        ("distill", f"validation accuracy {_num(distill, 'val_accuracy', '.2f', 100)} %, "
                    f"{_num(distill, 'student_params', ',.0f')} parameters",
         _num(distill, "steps", ".0f"), _num(distill, "train_seconds", ".0f")),
    )
    return Table(("stage", "result", "steps", "seconds"), rows)


def head_summary(heads: pd.DataFrame) -> Table:
    """The two heads scoring highest on each statistic."""
    rows = []
    for name, title in STATISTIC_TITLES.items():
        if name in heads:
            top = heads.nlargest(2, name)
            rows.append((f"attention {title}", ", ".join(f"layer {r.layer} head {r.head} ({getattr(r, name):.2f})"
                                                         for r in top.itertuples())))
    return Table(("what the head attends to", "strongest heads (mean attention weight)"), tuple(rows))


def examples(test: pd.DataFrame, predictions: pd.DataFrame, variant: str, count: int) -> dict[str, pd.DataFrame]:
    """Most confident mistakes, most confident right answers, least sure rows of ``variant``."""
    table = pd.DataFrame({"text": test["text"].to_numpy()[predictions["row"].to_numpy()], "label": predictions["label"],
                          "predicted": predictions[f"pred_{variant}"], "confidence": predictions[f"p_{variant}"]})
    wrong = table["predicted"] != table["label"]
    return {
        "most confident mistakes": table[wrong].sort_values("confidence", ascending=False, kind="stable").head(count),
        "most confident right answers": table[~wrong].sort_values("confidence", ascending=False, kind="stable").head(count),
        "least sure": table.sort_values("confidence", kind="stable").head(count),
    }


def predictions_wrong(predictions: pd.DataFrame, variant: str) -> int:
    """Test rows ``variant`` gets wrong."""
    return int((predictions[f"pred_{variant}"] != predictions["label"]).sum())


def example_table(rows: pd.DataFrame, classes: tuple[str, ...]) -> Table:
    def cut(text: str) -> str:
        return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1].rstrip() + "…"

    return Table(("text", "true", "predicted", "confidence"),
                 tuple((cut(r.text), classes[r.label], classes[r.predicted], f"{r.confidence:.3f}") for r in rows.itertuples()))


def run(params: Params, data: Prepared, stages: dict[str, dict[str, Any]], data_report: dict[str, Any], test: pd.DataFrame,
        predictions: pd.DataFrame, heads: pd.DataFrame, plots: Path, commit: str, registry: dict[str, Any]) -> list[Block]:
    """The report's blocks from the stages' metrics and the files evaluate wrote; DataError naming what is missing."""
    task = params.data.dataset
    evaluation = stages["evaluate"]
    for name in ("baseline", "teacher", DEPLOYED):
        if name not in evaluation:
            raise DataError(f"metrics/evaluate.json: no {name!r} entry; rerun `dvc repro evaluate`")
    blocks: list[Block] = [
        Heading("minibert run report", 1),
        Table(("", ""), (("task", f"{task}: {len(data.labels)} classes ({', '.join(data.labels)}), {len(test)} test rows"),
                         ("training rows", str(data_report.get("rows", {}).get("train", "n/a"))),
                         ("git commit", commit), ("teacher encoder", ", ".join(f"{k} {v}" for k, v in params.model.items())),
                         ("registered as", f"{registry.get('model_uri', 'n/a')} (aliases: {', '.join(registry.get('aliases', [])) or 'none'})"),
                         ("written", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")))),
        Heading("Results"), headline(evaluation, task), results_table(evaluation),
        Figure(plots / "tradeoff.png", "accuracy against single-text latency and against size, every variant"),
        Heading("Training"), training_table(stages),
    ]
    for stage, caption in (("pretrain", "MLM pretraining: loss, learning rate, held-out masked-token accuracy"),
                           ("finetune", "fine-tuning (after the intermediate task, when one is set): loss, learning rate, "
                                        "validation accuracy"),
                           ("distill", "distillation into the student: loss, learning rate, validation accuracy")):
        if (plots / "curves" / f"{stage}.png").is_file():
            blocks.append(Figure(plots / "curves" / f"{stage}.png", caption))
    blocks += [
        Heading("Where the models go wrong"),
        Figure(plots / "confusion.png", "confusion matrices on the test split, every variant"),
        Figure(plots / "calibration.png", "reliability diagram: how often a prediction made with a given confidence is "
                                          "right (ECE: expected calibration error)"),
        Heading("What the teacher attends to"),
    ]
    blocks.append(head_summary(heads))
    for i, text in enumerate(test["text"].tolist()[:PICTURED]):
        blocks.append(Figure(plots / "attention" / f"text_{i}.png", f"every head on {text[:TEXT_CHARS]!r}"))
    blocks.append(Figure(plots / "attention" / "heads.png", "per-head statistics over test texts; informative words are "
                                                            "the baseline's highest-weight words"))
    blocks.append(Heading(f"Example predictions of the deployed model ({DEPLOYED})"))
    for title, rows in examples(test, predictions, DEPLOYED, EXAMPLES).items():
        blocks += [Heading(title, 3), example_table(rows, data.labels) if len(rows) else Text("none")]
    missing = [str(b.path) for b in blocks if isinstance(b, Figure) and not b.path.is_file()]
    if missing:
        raise DataError(f"pictures missing: {', '.join(missing)}; rerun the stages that write them (`dvc repro`)")
    return blocks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--metrics-dir", type=Path, default=Path("metrics"))
    parser.add_argument("--data-report", type=Path, default=Path("reports/data.json"))
    parser.add_argument("--predictions", type=Path, default=Path("reports/predictions.csv"))
    parser.add_argument("--heads", type=Path, default=Path("reports/attention_heads.csv"))
    parser.add_argument("--registry", type=Path, default=Path("models/registry.json"))
    parser.add_argument("--plots", type=Path, default=Path("plots"))
    parser.add_argument("--out", type=Path, default=Path("reports/summary.md"), help="the HTML page goes beside it")
    args = parser.parse_args(argv)
    from pipeline.provenance import git_commit
    from pipeline.tracking import project_root, stage_run

    params: Params = load_params()
    stages = {name: read_json(args.metrics_dir / f"{name}.json")
              for name in ("pretrain", "finetune", "distill", "evaluate") if (args.metrics_dir / f"{name}.json").is_file()}
    if "evaluate" not in stages:
        raise FileNotFoundError(f"{args.metrics_dir / 'evaluate.json'} not found; run `dvc repro evaluate` first")
    test_path = split_path(args.data, "test")
    inputs = [args.metrics_dir / f"{name}.json" for name in stages] + [args.predictions, args.heads, test_path]
    with stage_run("report", params, inputs) as tracker:
        sha, dirty = git_commit(project_root())
        predictions = pd.read_csv(args.predictions)
        blocks = run(params, prepared(args.data), stages, read_json(args.data_report), load_split(args.data, "test"),
                       predictions, pd.read_csv(args.heads), args.plots, sha + (" (uncommitted changes)" if dirty else ""),
                       read_json(args.registry) if args.registry.is_file() else {})
        html_path = args.out.with_suffix(".html")
        with atomic_path(html_path) as tmp:
            tmp.write_text(to_html(blocks, "minibert run report"), encoding="utf-8")
        with atomic_path(args.out) as tmp:
            tmp.write_text(to_markdown(blocks, args.out.parent), encoding="utf-8")
        evaluation, wrong = stages["evaluate"], predictions_wrong(predictions, DEPLOYED)
        tracker.log_metrics({"deployed_accuracy": evaluation[DEPLOYED]["accuracy"],
                             "baseline_accuracy": evaluation["baseline"]["accuracy"],
                             "gain_over_baseline": evaluation[DEPLOYED]["accuracy"] - evaluation["baseline"]["accuracy"],
                             "deployed_mistakes": wrong, "pictures": sum(isinstance(b, Figure) for b in blocks)})
        tracker.log_artifact(html_path, "report")
        tracker.log_artifact(args.out, "report")
        tracker.log_artifact(args.plots, "plots")  # the Markdown's ../plots/ links resolve in the artifact store too


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
