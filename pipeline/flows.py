"""Prefect flows: orchestration only. The DAG lives in dvc.yaml; the flow fetches data, runs
`dvc repro` under one MLflow parent run (the same functions `minibert pipeline` calls), then
the promotion gate (`pipeline/promotion.py`), and adds what DVC lacks: retries on transient
failures (the network-facing fetch; a `dvc repro` that fails is retried once and reruns only
what did not finish), a schedule, a run history in Prefect.

`minibert retrain` runs the flow once; without PREFECT_API_URL, Prefect starts a temporary local
API for it (first start ~20 s; raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS if it times
out). `minibert schedule` serves it as a deployment with a cron schedule; schedules fire only
against a real server (`prefect server start`), so it refuses to start without one.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import zoneinfo
from pathlib import Path

from prefect import flow, get_run_logger, task

from minibert.validation import ConfigError
from pipeline import data_change, datasets
from pipeline.deadline import pipeline_deadline, verdict
from pipeline.io import StageError
from pipeline.orchestration import PipelineResult, fetch_data, run_pipeline
from pipeline.params import load_params

FLOW_NAME = "minibert-retrain"
WEEKLY = "0 3 * * 0"  # Sundays 03:00


@task(name="fetch-data", retries=2, retry_delay_seconds=30)
def fetch_data_task() -> None:
    fetch_data(load_params().data)


@task(name="dvc-repro", retries=1, retry_delay_seconds=10)
def repro_task(force: bool, started: float) -> PipelineResult:
    return run_pipeline(load_params(), force=force, entry="prefect", started=started)


@task(name="promote")
def promote_task(context: dict[str, str]) -> dict[str, object]:
    from pipeline.promotion import promote_with_params
    from pipeline.tracking import project_root

    decision = promote_with_params(load_params(), Path("data/prepared"), None, project_root(), context)
    return {"promoted": decision.promote, "reason": decision.reason}


@flow(name=FLOW_NAME)
def retrain_flow(force: bool = False) -> dict[str, object]:
    """Fetch data, run the DVC pipeline (DVC reruns what a new data digest or params change), then the promotion
    gate on the new challenger, with what changed in the training data logged beside the decision.

    Returns the seconds each (re)run stage took, the data change and the gate's decision."""
    started = time.time()  # the deadline (params.deadline) counts the data fetch too
    params = load_params()
    transfer = datasets.load(params.data.dataset).intermediate is not None
    with pipeline_deadline(params, started, transfer):  # opened here, so that a retried repro_task keeps its record
        fetch_data_task()
        result = repro_task(force, started)
    logger = get_run_logger()
    if (line := verdict(params, time.time() - started)) is not None:
        logger.info(line)
    context = data_change.tags(result.data_change, result.data_digest)  # beside the decision
    decision = promote_task(context)
    logger.info("MLflow parent run %s; stages run: %s", result.run_id, ", ".join(result.stage_seconds) or "none")
    logger.info("%s (data digest %s)", context["data.summary"], result.data_digest or "unknown")
    logger.info("promotion: %s (%s)", "promoted" if decision["promoted"] else "refused", decision["reason"])
    return {"stage_seconds": result.stage_seconds, "data": context["data.summary"], "data_change": result.data_change,
            **decision}


def server_url(wait_s: float = 60.0) -> str:
    """The Prefect server's API URL once it answers healthy (a server just started takes ~20 s);
    raises StageError naming the fix."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise StageError("schedules need a Prefect server: run `prefect server start --host 127.0.0.1 --port 4200` "
                         "and `export PREFECT_API_URL=http://127.0.0.1:4200/api` (for one run now: `minibert retrain`)")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=10) as response:
                if response.status == 200:
                    return url
                problem = f"GET /health answered {response.status}"
        except (urllib.error.URLError, OSError) as err:
            problem = str(err)
        if time.monotonic() >= deadline:
            raise StageError(f"no healthy Prefect server at PREFECT_API_URL={url} after {wait_s:.0f} s ({problem}); "
                             "start one with `prefect server start --host 127.0.0.1 --port 4200`")
        time.sleep(2)


def cron_schedule(cron: str, timezone: str):
    """A Prefect cron schedule; raises ConfigError on a malformed cron string or unknown time zone."""
    from prefect.schedules import Cron

    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
        raise ConfigError(f"--timezone {timezone!r} is not a known IANA time zone (e.g. UTC, Europe/Paris)") from err
    try:
        return Cron(cron, timezone=timezone)
    except ValueError as err:
        raise ConfigError(f"--cron {cron!r} is not a cron expression (five fields: minute hour day month weekday, "
                          f"e.g. {WEEKLY!r} for Sundays 03:00)") from err


def schedule(name: str, cron: str = WEEKLY, timezone: str = "UTC", force: bool = False) -> None:
    """Serve ``retrain_flow`` as deployment ``minibert-retrain/<name>`` on ``cron`` until stopped
    (SIGTERM or Ctrl-C). One run at a time: a run due while another is running waits for it
    (two `dvc repro` in one workspace would contend for DVC's lock)."""
    when = cron_schedule(cron, timezone)
    url = server_url()
    print(f"serving {FLOW_NAME}/{name} on {url}, cron {cron!r} ({timezone}); "
          f"run it now with: prefect deployment run '{FLOW_NAME}/{name}'", flush=True)
    retrain_flow.serve(name=name, schedule=when, parameters={"force": force}, global_limit=1, tags=["minibert"],
                       description="dvc repro, then the promotion gate (minibert promote)")
