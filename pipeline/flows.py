"""Prefect flows: orchestration only. The DAG lives in dvc.yaml; the flow fetches data, runs
`dvc repro` under one MLflow parent run (the same functions `minibert pipeline` calls), then
the promotion gate (`pipeline/promotion.py`), and adds what DVC lacks: retries on transient
failures (the network-facing fetch; a `dvc repro` that fails is retried once and reruns only
what did not finish), a schedule, a run history in Prefect.

Without a server Prefect starts a temporary local API (first start ~20 s; raise
PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS if it times out). Schedules need a real server:
`prefect server start`, then `minibert flow serve --cron "0 3 * * 0"`.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task

from pipeline.orchestration import PipelineResult, fetch_data, run_pipeline
from pipeline.params import load_params


@task(name="fetch-data", retries=2, retry_delay_seconds=30)
def fetch_data_task() -> None:
    fetch_data(load_params().data)


@task(name="dvc-repro", retries=1, retry_delay_seconds=10)
def repro_task(force: bool) -> PipelineResult:
    return run_pipeline(load_params(), force=force, entry="prefect")


@task(name="promote")
def promote_task() -> dict[str, object]:
    from pipeline.promotion import promote_with_params
    from pipeline.tracking import project_root

    decision = promote_with_params(load_params(), Path("data/prepared"), None, project_root())
    return {"promoted": decision.promote, "reason": decision.reason}


@flow(name="minibert-retrain")
def retrain_flow(force: bool = False) -> dict[str, object]:
    """Fetch data, run the DVC pipeline, then the promotion gate on the new challenger.

    Returns the seconds each (re)run stage took and the gate's decision."""
    fetch_data_task()
    result = repro_task(force)
    decision = promote_task()
    logger = get_run_logger()
    logger.info("MLflow parent run %s; stages run: %s", result.run_id, ", ".join(result.stage_seconds) or "none")
    logger.info("promotion: %s (%s)", "promoted" if decision["promoted"] else "refused", decision["reason"])
    return {"stage_seconds": result.stage_seconds, **decision}
