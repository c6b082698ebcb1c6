"""The ``minibert`` command line: run the pipeline, fetch data, inspect presets.

``minibert pipeline`` is what ``make pipeline`` runs: fetch the raw data (``dvc pull`` from the
mirror remote, or the Hugging Face Hub when ``data.source: hub``), open one MLflow parent run,
run ``dvc repro`` (every stage joins the parent), and print each stage's time and the dev
accuracies.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from minibert.config import PRESETS
from minibert.model import build_mlm

RAW = Path("data/raw")


def count_parameters(name: str) -> tuple[int, int]:
    """(all, non-embedding) parameter counts of a preset's MLM model."""
    model = build_mlm(PRESETS[name])
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    return total, total - embedding


def cmd_presets(args: argparse.Namespace) -> int:
    print(f"{'preset':<8}{'layers':>7}{'hidden':>8}{'heads':>7}{'params (M)':>12}{'non-emb (M)':>13}")
    for name, cfg in PRESETS.items():
        total, non_embedding = count_parameters(name)
        print(f"{name:<8}{cfg.num_layers:>7}{cfg.hidden_size:>8}{cfg.num_heads:>7}{total / 1e6:>12.2f}{non_embedding / 1e6:>13.2f}")
    return 0


def _env() -> dict[str, str]:
    """The environment for dvc and the stages: this interpreter's bin first on PATH, telemetry off."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    return env


def fetch_data(source: str, sst2_id: str, imdb_id: str, revision: str | None) -> None:
    """Make data/raw hold SST-2 and IMDb: from the DVC mirror, or from the Hub (then dvc add)."""
    if source == "mirror":
        subprocess.run(["dvc", "pull", "--quiet", str(RAW / "sst2.dvc"), str(RAW / "imdb.dvc")], check=True, env=_env())
        return
    from pipeline.hub import fetch_all

    fetch_all(RAW, sst2_id, imdb_id, revision)
    subprocess.run(["dvc", "add", "--quiet", str(RAW / "sst2"), str(RAW / "imdb")], check=True, env=_env())


def cmd_fetch_data(args: argparse.Namespace) -> int:
    from pipeline.params import load_params

    data = load_params().data
    fetch_data(data.source, data.sst2_hub_id, data.imdb_hub_id, data.hub_revision)
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pipeline.params import load_params
    from pipeline.tracking import pipeline_run, stage_durations

    params = load_params()
    started = time.perf_counter()
    fetch_data(params.data.source, params.data.sst2_hub_id, params.data.imdb_hub_id, params.data.hub_revision)
    with pipeline_run(params) as run_id:
        repro = ["dvc", "repro", *(["--force"] if args.force else [])]
        code = subprocess.run(repro, env=_env()).returncode
        if code != 0:
            print(f"error: dvc repro failed (exit {code}); the parent MLflow run {run_id} is marked FAILED", file=sys.stderr)
            return code
    print(f"\npipeline run {run_id}: {time.perf_counter() - started:.0f} s in all")
    for stage, seconds in stage_durations(run_id).items():
        print(f"  {stage:<10} {seconds:8.1f} s")
    evaluation = Path("metrics/evaluate.json")
    if evaluation.is_file():
        import json

        print("\nSST-2 dev accuracy:")
        for variant, row in json.loads(evaluation.read_text()).items():
            print(f"  {variant:<13} {row['accuracy']:.4f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibert", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list model presets and their sizes").set_defaults(func=cmd_presets)
    sub.add_parser("fetch-data", help="pull the raw data (DVC mirror or Hugging Face Hub, per params.yaml)").set_defaults(
        func=cmd_fetch_data
    )
    run = sub.add_parser("pipeline", help="fetch data, then dvc repro under one MLflow parent run")
    run.add_argument("--force", action="store_true", help="rerun every stage even if DVC finds it up to date")
    run.set_defaults(func=cmd_pipeline)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pipeline.runner import run_main

    args = build_parser().parse_args(argv)
    return run_main(lambda: args.func(args), exit=False)


if __name__ == "__main__":
    raise SystemExit(main())
