"""Prefect flows: orchestration only. The DAG lives in dvc.yaml; the flow fetches data and runs
`dvc repro` under one MLflow parent run (the same functions `minibert pipeline` calls), and adds
what DVC lacks: retries on the network-facing step, a schedule, a run history in Prefect.

Without a server Prefect starts a temporary local API (first start ~20 s; raise
PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS if it times out). Schedules need a real server:
`prefect server start`, then `minibert flow serve --cron "0 3 * * 0"`.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task

from pipeline.orchestration import PipelineResult, fetch_data, run_pipeline
from pipeline.params import load_params


@task(name="fetch-data", retries=2, retry_delay_seconds=30)
def fetch_data_task() -> None:
    fetch_data(load_params().data)


@task(name="dvc-repro")
def repro_task(force: bool) -> PipelineResult:
    return run_pipeline(load_params(), force=force, entry="prefect")


@flow(name="minibert-pipeline")
def pipeline_flow(force: bool = False) -> dict[str, float]:
    """Fetch data, run the DVC pipeline; returns the seconds each (re)run stage took."""
    fetch_data_task()
    result = repro_task(force)
    logger = get_run_logger()
    logger.info("MLflow parent run %s; stages run: %s", result.run_id, ", ".join(result.stage_seconds) or "none")
    return result.stage_seconds
