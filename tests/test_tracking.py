"""MLflow tracking: one parent run per pipeline execution, one nested run per stage, provenance tags."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

mlflow = pytest.importorskip("mlflow")
from mlflow import MlflowClient  # noqa: E402

from minibert.validation import ConfigError  # noqa: E402
from pipeline.params import Params, flatten  # noqa: E402
from pipeline.provenance import data_digests, resume_fingerprint  # noqa: E402
from pipeline.tracking import (  # noqa: E402
    PARENT_ENV,
    STAGE_TAG,
    pipeline_run,
    stage_durations,
    stage_run,
)
from pipeline.transfer_texts import load_transfer_split  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracking_backend: str) -> Path:
    """A project folder with the project's dvc.yaml; runs go to its sqlite file, or to the
    PostgreSQL-backed server."""
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    monkeypatch.delenv(PARENT_ENV, raising=False)
    return tmp_path


def children(parent_id: str) -> list:
    client = MlflowClient()
    experiment = client.get_run(parent_id).info.experiment_id
    return client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")


def test_stages_nest_under_the_pipeline_run(store: Path, tracking_backend: str) -> None:
    params = Params()
    data = store / "input.txt"
    data.write_text("some data")
    with pipeline_run(params) as parent:
        assert os.environ[PARENT_ENV] == parent
        with stage_run("finetune", params, [data]) as tracker:
            tracker.log_metrics({"val_accuracy": 0.5}, step=3)
            tracker.log_artifact(data)
    assert PARENT_ENV not in os.environ
    client = MlflowClient()
    assert client.get_run(parent).info.status == "FINISHED"
    assert client.get_run(parent).data.params["finetune.lr"] == str(params.finetune.lr)
    (child,) = children(parent)
    assert child.data.tags[STAGE_TAG] == "finetune"
    assert {k.split(".")[0] for k in child.data.params} == {"task", "train", "finetune", "budgets"}  # its dvc.yaml params
    assert "finetune.lr" in child.data.params and "train.seed" in child.data.params
    assert "pretrain.max_steps" not in child.data.params
    assert child.data.tags["input_digest.input.txt"].startswith("local-md5:")
    assert child.data.tags["git_commit"] == "unknown"  # tmp_path is no git repository
    assert client.get_metric_history(child.info.run_id, "val_accuracy")[0].step == 3
    assert [a.path for a in client.list_artifacts(child.info.run_id)] == ["input.txt"]
    local = tracking_backend == "sqlite"
    assert (store / "mlflow.db").is_file() == local and (store / "mlartifacts").is_dir() == local
    assert list(stage_durations(parent)) == ["finetune"]


def test_a_stage_logs_single_params_it_names_by_dotted_key(store: Path) -> None:
    """teacher_logits reads one key of another section (``train.precision``), as its dvc.yaml entry
    says: its run records that key and not the rest of the section."""
    params = Params()
    with pipeline_run(params) as parent:
        with stage_run("teacher_logits", params, []):
            pass
    (child,) = children(parent)
    logged = set(child.data.params)
    assert "train.precision" in logged and "task.max_length" in logged
    assert not any(k.startswith("train.") and k != "train.precision" for k in logged)


def test_a_stage_logs_exactly_the_params_its_dvc_yaml_entry_declares(store: Path) -> None:
    """One list: the keys DVC reruns a stage for are the keys its run records, whatever dvc.yaml says."""
    (store / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"probe": {"cmd": "true", "params": [
        "soft_targets.shares", {"params.yaml": ["task.max_length"]}, {"profile.yaml": None}]}}}))
    params = Params()
    with pipeline_run(params) as parent:
        with stage_run("probe", params, []):
            pass
    (child,) = children(parent)
    expected = {k for k in flatten(params) if k.startswith("soft_targets.shares.")} | {"task.max_length"}
    assert set(child.data.params) == expected and len(expected) > 2


@pytest.mark.parametrize(("dvc_yaml", "message"), [
    (None, "dvc.yaml: cannot read it"),
    ({"stages": {"prepare": {"cmd": "true", "params": ["prepare"]}}}, "no stage 'probe'"),
    ({"stages": {"probe": {"cmd": "true", "params": [{"other.yaml": ["lr"]}]}}}, "name keys of params.yaml only"),
])
def test_a_stage_dvc_yaml_does_not_declare_is_refused_before_any_run_opens(store: Path, dvc_yaml: dict | None,
                                                                          message: str) -> None:
    (store / "dvc.yaml").unlink()
    if dvc_yaml is not None:
        (store / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml))
    with pipeline_run(Params()) as parent:
        with pytest.raises(ConfigError, match=message):
            with stage_run("probe", Params(), []):
                pass
    assert children(parent) == []


def test_an_empty_table_is_recorded_as_a_dataset_with_no_rows(store: Path) -> None:
    """The IMDb profile distils with no transfer set (rows: 0): logging that table must not fail."""
    params = Params()
    pd.DataFrame({"text": pd.Series([], dtype=object)}).to_parquet(store / "texts.parquet")
    empty = load_transfer_split(store / "texts.parquet")[["text"]]  # as the distill stage reads it: a str column
    full = pd.DataFrame({"text": ["a fine film", "dull"], "label": [1, 0]})
    with pipeline_run(params) as parent:
        with stage_run("distill", params, []) as tracker:
            tracker.log_dataset(empty, "transfer_set", store / "texts.parquet", context="training", targets=None)
            tracker.log_dataset(full, "sst2_train", store / "sst2_train.parquet", context="training")
    (child,) = children(parent)
    assert child.info.status == "FINISHED"
    inputs = {d.dataset.name: d.dataset for d in child.inputs.dataset_inputs}
    assert set(inputs) == {"transfer_set", "sst2_train"}
    assert json.loads(inputs["transfer_set"].profile)["num_rows"] == 0
    assert json.loads(inputs["sst2_train"].profile)["num_rows"] == 2
    assert inputs["transfer_set"].digest != inputs["sst2_train"].digest


def test_failures_mark_runs_failed(store: Path) -> None:
    params = Params()
    with pytest.raises(RuntimeError, match="boom"):
        with pipeline_run(params) as parent:
            with stage_run("pretrain", params, []):
                raise RuntimeError("boom")
    client = MlflowClient()
    assert client.get_run(parent).info.status == "FAILED"
    assert children(parent)[0].info.status == "FAILED"


def test_data_digests_come_from_dvc_records(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.bin").write_bytes(b"x")
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(
        {"schema": "2.0", "stages": {"s": {"cmd": "c", "outs": [{"path": "models/m.bin", "md5": "abc123"}]}}}))
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "sst2").mkdir()
    (tmp_path / "data" / "raw" / "sst2.dvc").write_text(yaml.safe_dump({"outs": [{"md5": "def456.dir", "path": "sst2"}]}))
    digests = data_digests([tmp_path / "models" / "m.bin", tmp_path / "data" / "raw" / "sst2"], tmp_path)
    assert digests == {"models/m.bin": "md5:abc123", "data/raw/sst2": "md5:def456.dir"}


def test_a_resume_checkpoint_matches_only_the_same_params_code_and_input_content(tmp_path: Path) -> None:
    """A killed pretraining resumes only when nothing DVC would rerun it for has changed: its declared
    params, its inputs' content (not dvc.lock's record of it) and the code dvc.yaml lists."""
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"pretrain": {
        "cmd": "true", "deps": ["code.py", "lib", "corpus.txt"], "params": ["train", "pretrain"]}}}))
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "maths.py").write_text("SCALE = 1\n")
    (tmp_path / "code.py").write_text("STEP = 1\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a fine film\n")
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"s": {"cmd": "c", "outs": [
        {"path": "corpus.txt", "md5": "recorded"}]}}}))

    def fingerprint(params: Params | None = None) -> str:
        return resume_fingerprint("pretrain", params or Params(), [corpus], tmp_path)

    first = fingerprint()
    (tmp_path / "lib" / "__pycache__").mkdir()
    (tmp_path / "lib" / "__pycache__" / "maths.cpython-311.pyc").write_bytes(b"byte code")  # not the code
    assert fingerprint() == first
    assert fingerprint(dataclasses.replace(Params(), finetune=dataclasses.replace(Params().finetune, lr=7e-4))) == first
    changed = [fingerprint(dataclasses.replace(Params(), pretrain=dataclasses.replace(Params().pretrain, max_steps=7))),
               fingerprint(dataclasses.replace(Params(), train=dataclasses.replace(Params().train, seed=7)))]
    for path, text in ((corpus, "a dull film\n"), (tmp_path / "code.py", "STEP = 2\n"), (tmp_path / "lib" / "maths.py", "SCALE = 2\n")):
        original = path.read_text()
        path.write_text(text)  # dvc.lock still records the old corpus
        changed.append(fingerprint())
        path.write_text(original)
    assert fingerprint() == first and len(set(changed)) == 5 and first not in changed


def test_stages_launched_by_one_dvc_process_share_a_parent(store: Path, tmp_path: Path) -> None:
    """A bare `dvc repro` has no parent run id in its env: its stages find each other by launcher."""
    stage = textwrap.dedent("""
        import sys
        from pipeline.params import Params
        from pipeline.tracking import stage_run
        with stage_run(sys.argv[1], Params(), []) as t:
            t.log_metrics({"ok": 1.0})
    """)
    script = tmp_path / "stage.py"
    script.write_text(stage)
    fake = tmp_path / "bin" / "dvc"  # stands in for dvc: a process named dvc running two stages
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{sys.executable} {script} prepare && {sys.executable} {script} tokenizer\n")
    fake.chmod(0o755)
    env = {**os.environ, "DVC_ROOT": str(store), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for _ in range(2):  # two separate dvc invocations
        subprocess.run([str(fake)], env=env, check=True, capture_output=True, timeout=120)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store / 'mlflow.db'}")
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("minibert").experiment_id])
    parents = [r for r in runs if r.info.run_name == "pipeline"]
    assert len(parents) == 2
    for parent in parents:
        assert sorted(r.data.tags[STAGE_TAG] for r in children(parent.info.run_id)) == ["prepare", "tokenizer"]
        assert parent.info.status == "FINISHED"
