"""The only importer of mlflow: runs, params, metrics, artifacts, datasets and the registry.

One parent run per pipeline execution, one nested run per stage. The parent is found in this
order: ``MINIBERT_PARENT_RUN_ID`` (set by ``minibert pipeline`` and the Prefect flow before they
call ``dvc repro``); else the run tagged with the ``dvc`` process that launched this stage (so a
bare ``dvc repro`` or ``dvc exp run`` still groups its stages under one parent, created by the
first stage it runs); else none (a stage run by hand is a top-level run).

Default store: ``sqlite:///<project>/mlflow.db`` with artifacts in ``<project>/mlartifacts``;
``MLFLOW_TRACKING_URI`` points everything at a server instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import mlflow
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID

from minibert.distributed import World
from pipeline.io import DataError
from pipeline.params import Params, flatten
from pipeline.provenance import data_digests, declared_param_values, git_commit, raw_data_digests

# Our commands' stdout is theirs to print: against a tracking server MLflow would add a
# "View run ... at: <url>" line to it whenever a run ends.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

PARENT_ENV = "MINIBERT_PARENT_RUN_ID"
LAUNCHER_TAG = "minibert.launcher"
STAGE_TAG = "minibert.stage"


def project_root() -> Path:
    return Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()


def configure(experiment: str, root: Path | None = None) -> str:
    """Point mlflow at the tracking store and make sure ``experiment`` exists; returns its id."""
    root = root or project_root()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return found.experiment_id
    local = uri.startswith("sqlite:") or uri.startswith("file:")
    artifact_location = (root / "mlartifacts").as_uri() if local else None
    return client.create_experiment(experiment, artifact_location=artifact_location)


class MlflowTracker:
    """The tracker the training loops take (``log_metrics``), plus what stages need."""

    def __init__(self, run_id: str, parent_id: str | None) -> None:
        self.run_id = run_id
        self.parent_id = parent_id

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None and v == v}  # drop NaN
        if clean:
            mlflow.log_metrics(clean, step=step)

    def log_params(self, params: dict[str, Any]) -> None:
        mlflow.log_params({k: "None" if v is None else v for k, v in params.items()})

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=artifact_path)
        else:
            mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def log_dataset(self, df: Any, name: str, source: str | os.PathLike[str], context: str, targets: str | None = "label") -> None:
        """Record a pandas table as an MLflow dataset input (name, digest, schema, source).

        MLflow cannot digest a table without rows (an empty transfer set, ``transfer_set.rows:
        0``), so an empty one gets a digest of its column names and is still recorded, with 0 rows.
        """
        digest = None if len(df) else hashlib.md5(("empty:" + ",".join(map(str, df.columns))).encode()).hexdigest()[:8]
        with warnings.catch_warnings():  # a local path matches two equivalent registered source types
            warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted in multiple ways")
            warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer column")
            dataset = mlflow.data.from_pandas(df, source=str(Path(source).resolve()), name=name, digest=digest,
                                              targets=targets if targets in df.columns else None)
            mlflow.log_input(dataset, context=context)  # the schema is inferred (and warned about) here


def _launcher() -> str | None:
    """"<pid>:<start time>" of the closest ancestor process that is ``dvc``, or None."""
    pid = os.getppid()
    for _ in range(8):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        names = [os.path.basename(a.decode(errors="replace")) for a in argv[:2]]
        if "dvc" in names or (len(argv) > 2 and argv[1] == b"-m" and argv[2] == b"dvc"):
            return f"{pid}:{fields[19]}"  # field 22 of stat: start time, so a reused pid never matches
        pid = int(fields[1])  # field 4: parent pid
        if pid <= 1:
            return None
    return None


def _provenance_tags(root: Path) -> dict[str, str]:
    sha, dirty = git_commit(root)
    return {MLFLOW_GIT_COMMIT: sha, "git_commit": sha, "git_dirty": str(dirty).lower()}


def _raw_data_digests(root: Path) -> dict[str, str]:
    return {f"data_digest.{k}": v for k, v in raw_data_digests(root).items()}


def _start_parent(experiment_id: str, params: Params, root: Path, tags: dict[str, str]) -> str:
    client = MlflowClient()
    run = client.create_run(
        experiment_id,
        run_name="pipeline",
        tags={**_provenance_tags(root), **_raw_data_digests(root), **tags},
    )
    for key, value in flatten(params).items():
        client.log_param(run.info.run_id, key, "None" if value is None else value)
    return run.info.run_id


def _find_or_open_launcher_parent(experiment_id: str, launcher: str, params: Params, root: Path) -> str:
    client = MlflowClient()
    found = client.search_runs([experiment_id], filter_string=f"tags.`{LAUNCHER_TAG}` = '{launcher}'", max_results=1)
    if found:
        return found[0].info.run_id
    return _start_parent(experiment_id, params, root, {LAUNCHER_TAG: launcher})


@contextlib.contextmanager
def pipeline_run(params: Params, root: Path | None = None, entry: str = "cli") -> Iterator[str]:
    """The parent run of one pipeline execution; stages started inside join it (via the env).

    ``entry`` (cli, prefect, ...) is recorded as the tag ``minibert.entry``.
    """
    root = root or project_root()
    experiment_id = configure(params.tracking.experiment, root)
    run_id = _start_parent(experiment_id, params, root, {"minibert.entry": entry})
    previous = os.environ.get(PARENT_ENV)
    os.environ[PARENT_ENV] = run_id
    status = "FAILED"
    try:
        yield run_id
        status = "FINISHED"
    finally:
        if previous is None:
            os.environ.pop(PARENT_ENV, None)
        else:
            os.environ[PARENT_ENV] = previous
        MlflowClient().set_terminated(run_id, status)


class SilentTracker(MlflowTracker):
    """What ranks other than 0 of a torchrun stage log to: nothing (rank 0 logs for the run)."""

    def __init__(self) -> None:
        super().__init__("", None)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        pass

    def log_dataset(self, df: Any, name: str, source: str | os.PathLike[str], context: str, targets: str | None = "label") -> None:
        pass


@contextlib.contextmanager
def stage_run(stage: str, params: Params, inputs: Sequence[Path]) -> Iterator[MlflowTracker]:
    """A nested run for one stage: the flattened params the stage declares in dvc.yaml (sections or
    dotted keys; one list, so the run records exactly what DVC re-runs the stage for), git commit,
    input digests. Under torchrun only rank 0 opens it; the other ranks get a tracker that logs nothing."""
    if not World.from_env().main:
        yield SilentTracker()
        return
    root = project_root()
    declared = declared_param_values(stage, params, root)
    experiment_id = configure(params.tracking.experiment, root)
    parent = os.environ.get(PARENT_ENV)
    launcher = None if parent else _launcher()
    if launcher is not None:
        parent = _find_or_open_launcher_parent(experiment_id, launcher, params, root)
        MlflowClient().update_run(parent, status="RUNNING")
    tags = {STAGE_TAG: stage, **_provenance_tags(root)}
    if parent:
        tags[MLFLOW_PARENT_RUN_ID] = parent
    digests = {f"input_digest.{k}": v for k, v in data_digests(list(inputs), root).items()}
    status = "FAILED"
    try:
        with mlflow.start_run(experiment_id=experiment_id, run_name=stage, tags={**tags, **digests}) as run:
            tracker = MlflowTracker(run.info.run_id, parent)
            tracker.log_params(declared)
            yield tracker
        status = "FINISHED"
    finally:
        if launcher is not None:  # nobody else will close a launcher parent: it is done when idle
            MlflowClient().set_terminated(parent, status)


def log_pyfunc_model(
    name: str, python_model: str, artifacts: dict[str, str], pip_requirements: list[str], input_example: Any,
    registered_model_name: str, model_config: dict[str, Any], tags: dict[str, str], code_paths: list[str] | None = None,
) -> str:
    """Log a models-from-code pyfunc in the active run, register it, tag the version; returns the version."""
    info = mlflow.pyfunc.log_model(
        name=name,
        python_model=python_model,
        code_paths=code_paths,
        artifacts=artifacts,
        pip_requirements=pip_requirements,
        input_example=input_example,
        model_config=model_config,
        registered_model_name=registered_model_name,
    )
    version = str(info.registered_model_version)
    client = MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(registered_model_name, version, key, value)
    return version


def set_aliases(model_name: str, version: str, aliases: Sequence[str]) -> None:
    client = MlflowClient()
    for alias in aliases:
        client.set_registered_model_alias(model_name, alias, version)


def alias_version(model_name: str, alias: str) -> str | None:
    """The version an alias points at, or None when the model or alias does not exist."""
    client = MlflowClient()
    try:
        return str(client.get_model_version_by_alias(model_name, alias).version)
    except mlflow.exceptions.MlflowException:
        return None


def log_to_run(run_id: str, metrics: dict[str, float], record: dict[str, Any], artifact: str, tags: dict[str, str]) -> None:
    """Metrics, tags and one JSON artifact added to a finished or running run (the pipeline's parent)."""
    client = MlflowClient()
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    client.log_dict(run_id, record, artifact)


def stage_durations(parent_id: str) -> dict[str, float]:
    """Seconds each stage's child run took, in start order."""
    client = MlflowClient()
    parent = client.get_run(parent_id)
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}'",
        order_by=["attributes.start_time ASC"],
    )
    return {r.data.tags.get(STAGE_TAG, r.info.run_name): ((r.info.end_time or r.info.start_time) - r.info.start_time) / 1000.0
            for r in children}


def served_predict(model_uri: str):  # noqa: ANN201 - a pyfunc's bound predict
    """The registered pyfunc at ``model_uri`` (``models:/name/3``, ``models:/name@champion``), loaded as served."""
    try:
        return mlflow.pyfunc.load_model(model_uri).predict
    except mlflow.exceptions.MlflowException as err:
        raise FileNotFoundError(f"{model_uri}: not in the registry ({err.message.splitlines()[0]}); "
                                "check the name, version or alias (`mlflow ui` lists them)") from None


def set_version_description(model_name: str, version: str, text: str) -> None:
    """The registry's description of a version (Markdown; the MLflow UI renders it)."""
    MlflowClient().update_model_version(model_name, version, description=text)


def version_tags(model_name: str, version: str) -> dict[str, str]:
    return dict(MlflowClient().get_model_version(model_name, version).tags)


def set_version_tags(model_name: str, version: str, tags: dict[str, str]) -> None:
    client = MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(model_name, version, key, value)


def record_run(experiment: str, name: str, params: dict[str, Any], metrics: dict[str, float], tags: dict[str, str]) -> str:
    """A top-level run (``promote``, ``rollback``) holding one registry decision; returns its id."""
    experiment_id = configure(experiment)
    with mlflow.start_run(experiment_id=experiment_id, run_name=name, tags={STAGE_TAG: name, **tags}) as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        return run.info.run_id


def _model_version(model_uri: str):  # noqa: ANN202 - an mlflow ModelVersion
    """``models:/name/3`` or ``models:/name@alias`` -> the registry's ModelVersion (clear error if absent)."""
    client = MlflowClient()
    body = model_uri.removeprefix("models:/")
    name, alias = body.split("@", 1) if "@" in body else (body, None)
    name, _, number = name.partition("/") if alias is None else (name, "", "")
    if body == model_uri or not name or not (alias or number):
        raise DataError(f"{model_uri!r} is not a registry URI; use models:/<name>/<version> or models:/<name>@<alias>")
    try:
        return client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, number)
    except mlflow.exceptions.MlflowException as err:
        raise FileNotFoundError(f"{model_uri}: not in the registry ({err.message.splitlines()[0]})") from None


def lineage(model_uri: str) -> dict[str, Any]:
    """What made a registered version: the registering run, the pipeline run above it, the git
    commit, the raw-data digests, the params and every stage's metrics."""
    client = MlflowClient()
    version = _model_version(model_uri)
    run = client.get_run(version.run_id)
    parent_id = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
    parent = client.get_run(parent_id) if parent_id else run
    stages = client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent.info.run_id}'")
    return {
        "model": version.name, "version": str(version.version), "aliases": sorted(version.aliases),
        "registered_by_run": version.run_id, "pipeline_run": parent.info.run_id,
        "git_commit": parent.data.tags.get("git_commit"), "git_dirty": parent.data.tags.get("git_dirty"),
        "data_digests": {k.removeprefix("data_digest."): v for k, v in parent.data.tags.items() if k.startswith("data_digest.")},
        "params": dict(sorted(parent.data.params.items())),
        "metrics": {f"{r.data.tags.get(STAGE_TAG, r.info.run_name)}.{k}": v
                    for r in stages for k, v in sorted(r.data.metrics.items())},
    }


def recent_pipeline_runs(experiment: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` pipeline runs: start, status, commit, entry, and what the evaluate stage measured."""
    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs([found.experiment_id], filter_string="tags.`mlflow.runName` = 'pipeline'",
                              order_by=["attributes.start_time DESC"], max_results=limit)
    rows = []
    for r in runs:
        evaluate = client.search_runs([found.experiment_id], max_results=1, filter_string=(
            f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{r.info.run_id}' and tags.`{STAGE_TAG}` = 'evaluate'"))
        rows.append({"run_id": r.info.run_id, "start_time": r.info.start_time, "status": r.info.status,
                     "git_commit": r.data.tags.get("git_commit", ""), "entry": r.data.tags.get("minibert.entry", ""),
                     "metrics": evaluate[0].data.metrics if evaluate else {}})
    return rows
