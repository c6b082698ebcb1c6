"""What every stage does last: write its metrics file, log metrics and artifacts to its run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.io import write_json
from pipeline.tracking import MlflowTracker


def finish_stage(tracker: MlflowTracker, metrics: dict[str, Any], metrics_path: Path,
                 artifacts: dict[Path, str | None] | None = None) -> None:
    """Write ``metrics`` (JSON, atomically) and log its numbers, the file and ``artifacts``
    ({path: artifact folder or None}) to the stage's MLflow run."""
    write_json(metrics, metrics_path)
    tracker.log_metrics({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    tracker.log_artifact(metrics_path)
    for path, folder in (artifacts or {}).items():
        tracker.log_artifact(path, folder)
