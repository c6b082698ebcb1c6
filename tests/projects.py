"""Helpers of the end-to-end tests: a copy of the working tree as a project of its own (git, the DVC mirror remote),
commands run in it with an environment that cannot reach the caller's servers, and its MLflow runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REMOTE = ROOT.parent / "shared" / "dvc-remote"
STAGES = ["prepare", "tokenizer", "pretrain", "finetune", "baseline", "transfer_set", "baseline_oof", "teacher_logits", "cnn",
          "soft_targets", "distill", "export", "quantize", "evaluate", "register", "report"]

# servers and runs of the caller's that the copy must not talk to
LOCAL_ONLY = ("MLFLOW_TRACKING_URI", "MINIBERT_PARENT_RUN_ID", "DVC_ROOT", "PREFECT_API_URL")


def sh(args: list[str], cwd: Path, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_ONLY}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.update(DVC_NO_ANALYTICS="1", MLFLOW_DISABLE_TELEMETRY="true", PREFECT_HOME=str(cwd / ".prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def copy_project(dest: Path) -> Path:
    """The working tree's tracked and untracked (not ignored) files copied to ``dest``, committed to a git repository
    of its own, its DVC remote the shared mirror."""
    files = sh(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    sh(["git", "init", "-q"], dest)
    sh(["git", "add", "-A"], dest)
    sh(["git", "commit", "-qm", "copy"], dest)
    sh(["dvc", "remote", "modify", "--local", "mirror", "url", str(REMOTE)], dest)
    return dest


def client_for(dest: Path):  # noqa: ANN201 - (mlflow, MlflowClient)
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{dest / 'mlflow.db'}")
    return mlflow, MlflowClient()


def runs_by_parent(client, experiment: str) -> dict[str, list]:  # noqa: ANN001
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    grouped: dict[str, list] = {r.info.run_id: [] for r in runs if r.info.run_name == "pipeline"}
    for r in runs:
        parent = r.data.tags.get("mlflow.parentRunId")
        if parent:
            grouped[parent].append(r)
    return grouped
