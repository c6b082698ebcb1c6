"""What `minibert pipeline` and the Prefect flow both do: fetch the raw data, then `dvc repro`
under one MLflow parent run. The DAG itself lives in dvc.yaml; this only drives it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline import data_change, datasets
from pipeline.deadline import pipeline_deadline
from pipeline.io import StageError
from pipeline.params import DataParams, Params
from pipeline.provenance import locked_dependency
from pipeline.tracking import log_to_run, pipeline_run, stage_durations

RAW = Path("data/raw")
PREPARED = Path("data/prepared")


def tool_env() -> dict[str, str]:
    """The environment for dvc and the stages: this interpreter's bin first on PATH, telemetry off."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    return env


def fetch_data(data: DataParams) -> None:
    """Make data/raw hold the DVC-tracked dataset folders (``data/raw/*.dvc``; prepare's dependency is the whole
    folder): `dvc pull` from the mirror remote; or, with ``data.source: hub``, the folders of the active dataset
    whose descriptions name a Hub source fetched from it and `dvc add`ed (so the Hub copy is versioned like the
    mirror's), its other folders pulled."""
    if data.source == "mirror":
        pulled = sorted(RAW.glob("*.dvc"))
    else:
        from pipeline.hub import fetch_sources

        sources = datasets.hub_sources(data.dataset)
        fetch_sources(RAW, sources, data.hub_revision)
        if sources:
            subprocess.run(["dvc", "add", "--quiet", *(str(RAW / folder) for folder in sources)], check=True, env=tool_env())
        pulled = [RAW / f"{folder}.dvc" for folder in datasets.needed_folders(data.dataset) if folder not in sources]
        pulled = [path for path in pulled if path.is_file()]
    if pulled:
        subprocess.run(["dvc", "pull", "--quiet", *map(str, pulled)], check=True, env=tool_env())


@dataclass(frozen=True)
class PipelineResult:
    run_id: str
    stage_seconds: dict[str, float]  # stages that ran (DVC skips the up-to-date ones)
    data_change: dict | None = None  # pipeline.data_change.compare of the prepared data before and after; None: no earlier data
    data_digest: str = ""  # data/raw's DVC digest the prepare stage read (dvc.lock)


def run_pipeline(params: Params, force: bool = False, entry: str = "cli", started: float | None = None) -> PipelineResult:
    """`dvc repro` under a new MLflow parent run; raises StageError if a stage fails. The run's
    deadline (``params.deadline``) counts from ``started`` (Unix time; default now), so a caller
    that fetched the data first passes the time it began. What the run changed in the training data
    (``pipeline.data_change``) is logged to the parent run: ``data_*`` metrics and ``data_change.json``."""
    transfer = datasets.load(params.data.dataset).intermediate is not None  # the teacher's transfer phase runs
    before, digest_before = data_change.snapshot(PREPARED), locked_dependency("prepare", str(RAW), Path("."))
    with pipeline_deadline(params, time.time() if started is None else started, transfer), \
            pipeline_run(params, entry=entry) as run_id:
        code = subprocess.run(["dvc", "repro", *(["--force"] if force else [])], env=tool_env()).returncode
        if code != 0:
            raise StageError(f"dvc repro failed (exit {code}); MLflow parent run {run_id} is marked FAILED")
    after, digest = data_change.snapshot(PREPARED), locked_dependency("prepare", str(RAW), Path("."))
    change = None if before is None or after is None else data_change.compare(before, after)
    record = {"raw_digest_before": digest_before, "raw_digest": digest, "change": change}
    tags = {"minibert.data_digest": digest, "minibert.data_changed": str(digest != digest_before).lower()}
    log_to_run(run_id, data_change.metrics(change) if change else {}, record, "data_change.json", tags)
    return PipelineResult(run_id, stage_durations(run_id), change, digest)
