"""The whole DAG through `minibert pipeline` (dvc repro under one MLflow parent) on the tiny profile,
in a temporary copy of the repository: outputs, MLflow runs, the registry, DVC's caching and
targeted reruns, and clean failures on bad input."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from projects import REMOTE, STAGES, client_for, copy_project, runs_by_parent, sh

from minibert.checkpoint import header, load_model, read_contract
from minibert.contract import read_onnx_contract
from minibert.textcnn import load_textcnn
from pipeline.params import load_params
from pipeline.tfidf import FOLDS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not REMOTE.is_dir(), reason=f"data mirror {REMOTE} not present"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git needed to copy the repository"),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A copy of the working tree with the tiny profile, after one `minibert pipeline` run."""
    dest = copy_project(tmp_path_factory.mktemp("e2e") / "project")
    defaults = (dest / "params.yaml").read_text()
    out = sh([sys.executable, "-m", "pipeline.cli", "pipeline", "--profile", "tiny"], dest)
    assert (dest / "params.yaml").read_text() == defaults, "a profile never rewrites params.yaml"
    active = {k: v for k, v in yaml.safe_load((dest / "profile.yaml").read_text()).items() if v}
    assert active == yaml.safe_load((dest / "profiles" / "tiny.yaml").read_text())
    return dest, out.stdout + out.stderr


def test_every_stage_ran_and_wrote_its_outputs(project: tuple[Path, str]) -> None:
    dest, log = project
    stages = yaml.safe_load((dest / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            path = out if isinstance(out, str) else next(iter(out))
            assert (dest / path).exists(), f"{name} did not write {path}"
    evaluation = json.loads((dest / "metrics" / "evaluate.json").read_text())
    assert sorted(evaluation) == ["baseline", "student", "student_int8", "student_onnx", "student_onnx_int8", "teacher"]
    for row in evaluation.values():
        assert 0.0 <= row["accuracy"] <= 1.0 and row["size_mb"] > 0 and row["p50_ms"] > 0 and row["throughput_per_s"] > 0
    export = json.loads((dest / "metrics" / "export.json").read_text())
    assert max(export[f"{graph}max_abs_diff_b{b}"] for b in (1, 8, 32) for graph in ("", "fused_")) <= 1e-4
    assert export["fused_Attention_nodes"] == 1 and export["fused_SkipLayerNormalization_nodes"] >= 1, "fused graph"
    assert evaluation["student_onnx"]["accuracy"] == evaluation["student"]["accuracy"]
    scored = json.loads((dest / "metrics" / "teacher_logits.json").read_text())["bf16_autocast"]
    assert evaluation["teacher"]["bf16_autocast"] == float(scored), "evaluate scores the teacher as teacher_logits does"
    assert evaluation["student"]["bf16_autocast"] == 0.0, "the fp32 student is the export's parity reference"
    quantize = json.loads((dest / "metrics" / "quantize.json").read_text())
    kinds = {kind: quantize[f"deployed_{kind}"] for kind in ("static", "dynamic", "fp32")}
    deployed_kind = max(kinds, key=kinds.get)
    assert quantize[f"probe_ms_{deployed_kind}"] > 0 and quantize[f"probe_single_ms_{deployed_kind}"] > 0, "timed"
    assert sorted(kinds.values()) == [0.0, 0.0, 1.0], "one graph deployed, chosen by the gate and the timing"
    assert kinds["fp32"] == 1.0 or quantize["onnx_int8_mb"] < quantize["onnx_fp32_mb"]
    from minibert.contract import onnx_parity
    from minibert.engines import PORTABLE_PATH, load_engine

    record = onnx_parity(load_engine(dest / "models" / "quantize" / "student_int8.onnx").metadata, "deployed")
    assert PORTABLE_PATH in record.verified and quantize["paths_verified"] == len(record.verified)
    assert all(r["argmax_agreement"] >= 0.995 and r["accuracy_delta"] >= -0.003 for r in record.verified.values())
    assert (dest / "plots" / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    logits = np.load(dest / "models" / "teacher_logits" / "train.npz")
    assert logits["logits"].shape == (len(logits["labels"]), 2) and len(logits["labels"]) >= 250
    oof = np.load(dest / "models" / "baseline_oof" / "train.npz")  # TF-IDF's out-of-fold log-probabilities
    np.testing.assert_array_equal(oof["labels"], logits["labels"])
    np.testing.assert_allclose(np.exp(oof["logits"]).sum(axis=1), 1.0, atol=1e-4)
    oof_metrics = json.loads((dest / "metrics" / "baseline_oof.json").read_text())
    assert not oof_metrics["skipped"] and oof_metrics["extra_rows"] > 0 and oof_metrics["folds"] == FOLDS
    cnn = np.load(dest / "models" / "cnn" / "train.npz")  # the word-CNN's logits, row by row as the teacher's
    np.testing.assert_array_equal(cnn["labels"], logits["labels"])
    assert cnn["logits"].shape == logits["logits"].shape and np.isfinite(cnn["logits"]).all()
    assert np.load(dest / "models" / "cnn" / "transfer.npz")["logits"].shape == (200, 2)
    cnn_metrics = json.loads((dest / "metrics" / "cnn.json").read_text())
    assert not cnn_metrics["skipped"] and cnn_metrics["extra_rows"] > 0 and 0.0 <= cnn_metrics["val_accuracy"] <= 1.0
    distill = json.loads((dest / "metrics" / "distill.json").read_text())
    assert 0.0 <= distill["soft_target_train_accuracy"] <= 1.0
    # the transfer set: 200 unlabelled sentences (tiny profile), scored by the teacher and by TF-IDF, learnt on
    transfer = pd.read_parquet(dest / "data" / "transfer" / "texts.parquet")["text"]
    assert len(transfer) == 200 and not set(transfer) & set(pd.read_parquet(dest / "data" / "prepared" / "test.parquet")["text"])
    teacher_transfer = np.load(dest / "models" / "teacher_logits" / "transfer.npz")
    assert teacher_transfer["logits"].shape == (200, 2) and (teacher_transfer["labels"] == -1).all()
    baseline_transfer = np.load(dest / "models" / "baseline_oof" / "transfer.npz")["logits"]
    assert baseline_transfer.shape == (200, 2)
    np.testing.assert_allclose(np.exp(baseline_transfer).sum(axis=1), 1.0, atol=1e-4)
    assert distill["transfer_rows"] == 200
    pretrain = json.loads((dest / "metrics" / "pretrain.json").read_text())
    assert pretrain["ppmi_vocab"] > 32 and pretrain["ppmi_tokens"] > 0, "word vectors from co-occurrences first"
    report = json.loads((dest / "reports" / "data.json").read_text())
    assert report["rows"]["train"] == 300 and report["rows"]["test"] == 120 and report["dataset"] == "sst2"
    assert json.loads((dest / "data" / "prepared" / "dataset.json").read_text()) == {
        "labels": ["negative", "positive"], "intermediate": "imdb"}, "the prepared data's contract"
    per_class = pd.read_csv(dest / "reports" / "per_class.csv")
    assert sorted(per_class["class"].unique()) == ["negative", "positive"] and len(per_class) == 12, "6 variants x 2 classes"
    assert (per_class.groupby("variant")["support"].sum() == 120).all()
    for stage in STAGES:
        assert re.search(rf"^\s+{stage}\s+\d+\.\d s$", log, re.M), f"no timing line for {stage} in the summary"
    assert "sst2 accuracy on the test split of record:" in log


def test_the_run_deadline_reaches_every_training_loop(project: tuple[Path, str]) -> None:
    """The tiny profile's 3-second deadline is always behind: `minibert pipeline` hands the plan
    through dvc to each stage, and every loop keeps the floor (0.25) of its planned budget."""
    dest, log = project
    params = load_params(dest / "params.yaml")
    pretrain, finetune, cnn, distill = (json.loads((dest / "metrics" / f"{s}.json").read_text())
                                        for s in ("pretrain", "finetune", "cnn", "distill"))
    planned = {"pretrain": params.pretrain.time_budget_min, "transfer_": params.finetune.transfer.time_budget_min,
               "finetune": params.finetune.time_budget_min, "cnn": params.cnn.time_budget_min,
               "distill": params.distill.time_budget_min}
    for metrics, prefix, loop in ((pretrain, "", "pretrain"), (finetune, "transfer_", "transfer_"), (finetune, "", "finetune"),
                                  (cnn, "", "cnn"), (distill, "", "distill")):
        assert metrics[f"{prefix}deadline_scale"] == 0.25, prefix
        assert metrics[f"{prefix}time_budget_s"] == pytest.approx(0.25 * 60 * planned[loop])
    assert finetune["transfer_deadline_untimed_s"] < finetune["deadline_untimed_s"] < distill["deadline_untimed_s"]
    assert re.search(r"^deadline 0.05 min: missed by \d+ s$", log, re.M), log[-2000:]


def test_one_parent_run_with_a_child_per_stage(project: tuple[Path, str]) -> None:
    dest, _ = project
    mlflow, client = client_for(dest)
    grouped = runs_by_parent(client, "minibert-tiny")
    assert len(grouped) == 1
    (parent_id, kids), = grouped.items()
    parent = client.get_run(parent_id)
    head = sh(["git", "rev-parse", "HEAD"], dest).stdout.strip()
    assert parent.info.status == "FINISHED" and parent.data.tags["git_commit"] == head
    sst2_md5 = yaml.safe_load((dest / "data" / "raw" / "sst2.dvc").read_text())["outs"][0]["md5"]
    assert parent.data.tags["data_digest.data/raw/sst2"] == f"md5:{sst2_md5}"
    assert [k.data.tags["minibert.stage"] for k in kids] == STAGES
    for kid in kids:
        stage = kid.data.tags["minibert.stage"]
        assert kid.info.status == "FINISHED", stage
        assert kid.data.params, f"{stage} logged no params"
        assert kid.data.metrics, f"{stage} logged no metrics"
        assert client.list_artifacts(kid.info.run_id), f"{stage} logged no artifacts"
        assert kid.data.tags["git_commit"] == head
        assert any(k.startswith("input_digest.") for k in kid.data.tags), f"{stage} logged no input digests"
    by_stage = {k.data.tags["minibert.stage"]: k for k in kids}
    lock = yaml.safe_load((dest / "dvc.lock").read_text())["stages"]
    pretrain_md5 = next(o["md5"] for o in lock["pretrain"]["outs"] if o["path"].endswith("model.safetensors"))
    assert by_stage["finetune"].data.tags["input_digest.models/pretrain/model.safetensors"] == f"md5:{pretrain_md5}"
    assert {d.dataset.name for d in by_stage["finetune"].inputs.dataset_inputs} == {"train", "val", "intermediate_train", "intermediate_val"}
    assert {d.dataset.name for d in by_stage["distill"].inputs.dataset_inputs} == {"train", "transfer_set"}
    finetune = json.loads((dest / "metrics" / "finetune.json").read_text())
    assert 0.0 <= finetune["transfer_val_accuracy"] <= 1.0 and finetune["transfer_steps"] > 0, "IMDb transfer phase ran"
    assert len(client.get_metric_history(by_stage["finetune"].info.run_id, "transfer_train_loss")) >= 1
    assert len(client.get_metric_history(by_stage["pretrain"].info.run_id, "train_loss")) >= 2
    assert by_stage["finetune"].data.params["finetune.lr"] == "0.0001"
    assert by_stage["finetune"].data.params["train.seed"] == "0", "the shared training keys are the stage's too"


def test_registry_holds_a_loadable_challenger(project: tuple[Path, str]) -> None:
    dest, _ = project
    mlflow, client = client_for(dest)
    record = json.loads((dest / "models" / "registry.json").read_text())
    assert record["version"] == "1" and sorted(record["aliases"]) == ["challenger", "champion"]
    version = client.get_model_version_by_alias("minibert-sst2", "challenger")
    assert str(version.version) == "1" and version.tags["git_commit"] == sh(["git", "rev-parse", "HEAD"], dest).stdout.strip()
    local = Path(mlflow.artifacts.download_artifacts(f"models:/minibert-sst2/{version.version}"))
    kept = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert "serving_model.py" in kept and "artifacts/README.md" in kept and not [p for p in kept if p.endswith((".pkl", ".pickle", ".joblib", ".pt"))], kept
    model = mlflow.pyfunc.load_model("models:/minibert-sst2@challenger")
    out = model.predict(pd.DataFrame({"text": ["a moving , funny film", "flat , boring and far too long"]}))
    assert list(out.columns) == ["label", "probability", "p_negative", "p_positive"] and len(out) == 2
    assert set(out["label"]) <= {"negative", "positive"} and out["probability"].between(0.5, 1.0).all()


PICTURES = ["curves/pretrain.png", "curves/finetune.png", "curves/distill.png", "tradeoff.png", "confusion.png",
            "calibration.png", "attention/text_0.png", "attention/text_1.png", "attention/heads.png"]


def test_the_run_leaves_a_report_with_every_picture(project: tuple[Path, str]) -> None:
    from test_plots import png_size

    dest, _ = project
    summary = (dest / "reports" / "summary.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(\.\./plots/([^)]+)\)", summary)
    assert sorted(linked) == sorted(PICTURES), "the report shows every picture, each once"
    for name in PICTURES:
        width, height = png_size(dest / "plots" / name)
        assert width >= 600 and height >= 300 and (dest / "plots" / name).stat().st_size > 15_000, name
    for variant in ("baseline", "teacher", "student", "student_int8", "student_onnx", "student_onnx_int8"):
        assert re.search(rf"^\| {variant} \| .+ \| [-+]\d+\.\d\d \|$", summary, re.M), f"no results row for {variant}"
    assert "### most confident mistakes" in summary and "| text | true | predicted | confidence |" in summary
    page = (dest / "reports" / "summary.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(PICTURES) and "../plots" not in page, "self-contained"
    curves = {stage: pd.read_csv(dest / "plots" / "curves" / f"{stage}.csv") for stage in ("pretrain", "finetune", "distill")}
    assert curves["pretrain"].dropna(subset=["eval_mlm_accuracy"])["step"].tolist() == [4, 8], "pretrain.eval_every: 4"
    assert curves["finetune"]["phase"].unique().tolist() == ["transfer", "task"]
    assert curves["finetune"]["step"].is_monotonic_increasing and curves["distill"]["train_loss"].notna().sum() >= 2
    heads = pd.read_csv(dest / "reports" / "attention_heads.csv")
    assert len(heads) == 2 and heads[["next_token", "cls", "sep", "informative"]].stack().between(0, 1).all(), "1 layer x 2 heads"

    mlflow, client = client_for(dest)
    runs = {r.data.tags["minibert.stage"]: r.info.run_id for r in client.search_runs(
        [client.get_experiment_by_name("minibert-tiny").experiment_id], order_by=["attributes.start_time ASC"])
        if "minibert.stage" in r.data.tags}

    def artifacts(stage: str, folder: str | None = None) -> list[str]:
        return [a.path for a in client.list_artifacts(runs[stage], folder)]

    assert {"report/summary.md", "report/summary.html"} <= set(artifacts("report", "report"))
    assert "curves/pretrain.png" in artifacts("pretrain", "curves") and "curves/finetune.csv" in artifacts("finetune", "curves")
    assert {"attention/heads.png", "attention/text_0.png"} <= set(artifacts("evaluate", "attention"))
    assert {"confusion.png", "calibration.png", "predictions.csv", "per_class.csv"} <= set(artifacts("evaluate"))
    local = Path(mlflow.artifacts.download_artifacts("models:/minibert-sst2/1"))
    card = (local / "artifacts" / "README.md").read_text()
    assert card == (dest / "models" / "card" / "README.md").read_text()
    sst2_md5 = yaml.safe_load((dest / "data" / "raw" / "sst2.dvc").read_text())["outs"][0]["md5"]
    for needle in ("## Intended use", "## Limitations", f"md5:{sst2_md5}", "## Metrics on the test split of record"):
        assert needle in card, needle
    assert client.get_model_version("minibert-sst2", "1").description.startswith("# minibert-sst2, version 1")


def test_lineage_and_runs_trace_the_champion_to_commit_data_and_metrics(project: tuple[Path, str]) -> None:
    dest, _ = project
    out = sh([sys.executable, "-m", "pipeline.cli", "lineage", "models:/minibert-sst2@champion"], dest)
    record = json.loads(out.stdout)
    assert record["version"] == "1" and "champion" in record["aliases"]
    assert record["git_commit"] == sh(["git", "rev-parse", "HEAD"], dest).stdout.strip()
    sst2_md5 = yaml.safe_load((dest / "data" / "raw" / "sst2.dvc").read_text())["outs"][0]["md5"]
    assert record["data_digests"]["data/raw/sst2"] == f"md5:{sst2_md5}"
    assert record["params"]["distill.student.preset"] == "nano", "the overlay's value, as the stage read it"
    evaluation = json.loads((dest / "metrics" / "evaluate.json").read_text())
    assert record["metrics"]["evaluate.student_onnx_int8.accuracy"] == pytest.approx(evaluation["student_onnx_int8"]["accuracy"])
    bad = sh([sys.executable, "-m", "pipeline.cli", "lineage", "minibert-sst2"], dest, check=False)
    assert bad.returncode == 2 and "is not a registry URI" in bad.stderr
    runs = sh([sys.executable, "-m", "pipeline.cli", "runs"], dest).stdout.splitlines()
    assert runs[0].startswith("started (UTC)") and len(runs) >= 2
    assert record["pipeline_run"] in "\n".join(runs) and f"{evaluation['teacher']['accuracy']:.4f}" in "\n".join(runs)


def test_second_repro_is_a_noop(project: tuple[Path, str]) -> None:
    """Also after Python byte-compiled the code (where PYTHONDONTWRITEBYTECODE is unset, importing a
    module writes __pycache__/ into `minibert`, a dependency folder): .dvcignore keeps it out."""
    dest, _ = project
    sh([sys.executable, "-m", "compileall", "-q", "minibert", "pipeline"], dest)
    assert list((dest / "minibert" / "__pycache__").glob("*.pyc"))
    start = time.perf_counter()
    out = sh(["dvc", "repro"], dest)
    elapsed = time.perf_counter() - start
    assert "Data and pipelines are up to date" in out.stdout + out.stderr
    assert "Running stage" not in out.stdout
    print(f"no-op dvc repro: {elapsed:.2f} s")


def test_prefect_flow_runs_the_same_pipeline(project: tuple[Path, str]) -> None:
    """The retrain flow (on Prefect's temporary local API) drives the same dvc repro (a no-op here)
    under a new parent run tagged as Prefect's, then the promotion gate (which refuses: the
    challenger is already the champion)."""
    dest, _ = project
    out = sh([sys.executable, "-m", "pipeline.cli", "retrain"], dest)
    assert "Completed" in out.stdout + out.stderr
    assert "refused: version 1 is already the champion" in out.stdout
    assert "stages run: none" in out.stdout and "data: unchanged (300 training rows)" in out.stdout
    mlflow, client = client_for(dest)
    exp = client.get_experiment_by_name("minibert-tiny")
    (flow_run,) = client.search_runs([exp.experiment_id], filter_string="tags.`minibert.entry` = 'prefect'")
    assert flow_run.info.status == "FINISHED"
    assert runs_by_parent(client, "minibert-tiny")[flow_run.info.run_id] == [], "nothing to rerun"
    (gate,) = client.search_runs([exp.experiment_id], filter_string="tags.`minibert.stage` = 'promote'")
    assert gate.data.metrics["promoted"] == 0.0 and "already the champion" in gate.data.tags["promotion.reason"]


def test_changing_the_finetune_lr_reruns_only_what_depends_on_it(project: tuple[Path, str]) -> None:
    dest, _ = project
    out = sh(["dvc", "exp", "run", "-S", "finetune.lr=0.0003"], dest)
    ran = re.findall(r"Running stage '(\w+)'", out.stdout + out.stderr)
    assert ran == ["finetune", "teacher_logits", "soft_targets", "distill", "export", "quantize", "evaluate", "register", "report"]
    diff = sh(["dvc", "params", "diff", "--json"], dest).stdout
    change = json.loads(diff)["params.yaml"]["finetune.lr"]
    assert (change["old"], change["new"]) == (0.0001, 0.0003)
    shown = sh(["dvc", "metrics", "show", "--json"], dest).stdout
    assert "student_onnx" in shown
    mlflow, client = client_for(dest)
    grouped = runs_by_parent(client, "minibert-tiny")
    assert len(grouped) == 3, "pipeline, prefect flow, and one new parent for the experiment's stages"
    newest = [kids for kids in grouped.values() if kids and len(kids) != len(STAGES)][0]
    assert [k.data.tags["minibert.stage"] for k in newest] == ran
    assert str(client.get_model_version_by_alias("minibert-sst2", "challenger").version) == "2"
    assert str(client.get_model_version_by_alias("minibert-sst2", "champion").version) == "1"


def test_the_same_data_under_another_name_changes_no_model(project: tuple[Path, str]) -> None:
    """No code branches on a dataset's name: SST-2 described as 'renamed' prepares byte for byte the same tables, so
    DVC reruns prepare and the two stages that print the name (register's card, the report) and no model changes."""
    dest, _ = project

    def outs() -> dict[str, str]:
        stages = yaml.safe_load((dest / "dvc.lock").read_text())["stages"]
        return {o["path"]: o["md5"] for stage in stages.values() for o in stage.get("outs", [])}

    before = outs()
    shutil.copy(dest / "datasets" / "sst2.yaml", dest / "datasets" / "renamed.yaml")
    out = sh(["dvc", "exp", "run", "-S", "data.dataset=renamed"], dest)
    assert re.findall(r"Running stage '(\w+)'", out.stdout + out.stderr) == ["prepare", "register", "report"]
    after = outs()
    named = {"reports/data.json", "models/registry.json", "models/card/README.md", "reports/summary.md", "reports/summary.html"}
    assert {path for path in before if before[path] != after[path]} <= named
    assert after["data/prepared"] == before["data/prepared"] and len(before) > 25, "every model file the same"
    assert "'renamed'" in (dest / "models" / "card" / "README.md").read_text()


def test_the_imdb_task_reads_long_reviews_through_sliding_windows(project: tuple[Path, str]) -> None:
    dest, _ = project
    # every review's windows are training rows: the TF-IDF soft targets (per review) must follow them
    # keys the active overlay sets are set in it (profile.yaml:key): an overlay's value wins over params.yaml's
    out = sh(["dvc", "exp", "run", "-S", "data.dataset=imdb", "-S", "task.truncation=windows",
              "-S", "profile.yaml:distill.student_kind=word_cnn", "-S", "profile.yaml:distill.hidden_weight=0",
              "-S", "profile.yaml:distill.attention_weight=0", "-S", "cnn.bag_buckets=4096", "-S", "profile.yaml:distill.soup=2"],
             dest)  # and a soup of two word-CNN students (no layers to match) with an n-gram bag through export and int8
    ran = re.findall(r"Running stage '(\w+)'", out.stdout + out.stderr)
    assert ran[:3] == ["prepare", "tokenizer", "pretrain"], "another dataset: its own corpus, tokenizer and encoder"
    assert {"finetune", "baseline", "baseline_oof", "cnn", "distill", "evaluate", "register", "report"} <= set(ran)
    reviews = np.load(dest / "models" / "baseline_oof" / "train.npz")["labels"]
    windows = np.load(dest / "models" / "teacher_logits" / "train.npz")["labels"]
    assert len(windows) > len(reviews) and set(np.unique(windows)) == set(np.unique(reviews))
    np.testing.assert_array_equal(np.load(dest / "models" / "cnn" / "train.npz")["labels"], windows)  # the CNN's too
    evaluation = json.loads((dest / "metrics" / "evaluate.json").read_text())
    assert evaluation["student_onnx"]["accuracy"] == evaluation["student"]["accuracy"]
    export = json.loads((dest / "metrics" / "export.json").read_text())
    assert max(export[f"{graph}max_abs_diff_b{b}"] for b in (1, 8, 32) for graph in ("", "fused_")) <= 1e-4
    assert export["fused_Attention_nodes"] == 0, "a word-CNN student has no attention to fuse"
    assert header(dest / "models" / "distill" / "model.safetensors")["kind"] == "textcnn"
    student = load_textcnn(dest / "models" / "distill" / "model.safetensors")[0]
    assert student.bag is not None and torch.count_nonzero(student.bag.weight.weight) > 0, "the bag trained"
    pretrained = load_model(dest / "models" / "pretrain" / "model.safetensors")[0].backbone.embeddings.tokens.weight
    assert not torch.equal(student.embedding.weight, pretrained), "the word vectors trained on"
    distill = json.loads((dest / "metrics" / "distill.json").read_text())
    assert "tensors_from_teacher" not in distill and 0 < distill["student_non_embedding_params"] < distill["student_params"]
    contract = read_contract(dest / "models" / "distill" / "model.safetensors")
    assert contract == read_contract(dest / "models" / "cnn" / "model.safetensors"), "the student reads as the word-CNN"
    deployed = read_onnx_contract(dest / "models" / "quantize" / "student_int8.onnx")
    assert dataclasses.replace(deployed, temperature=1.0) == contract, "carried to the deployed graph"
    quantized = json.loads((dest / "metrics" / "quantize.json").read_text())
    assert deployed.temperature == pytest.approx(quantized["temperature"]) and deployed.temperature != 1.0, "calibrated"
    assert quantized["val_nll"] <= quantized["val_nll_before_temperature"]
    assert evaluation["student_onnx_int8"]["temperature"] == pytest.approx(deployed.temperature)
    assert "ece_before_temperature" in evaluation["student_onnx_int8"] and "temperature" not in evaluation["student_onnx"]
    assert distill["soup"] == 2 and len(distill["soup_member_val_accuracy"]) == 2
    assert 0.0 <= evaluation["student_onnx_int8"]["accuracy"] <= 1.0 and evaluation["student_onnx_int8"]["p50_ms"] > 0
    mlflow, client = client_for(dest)
    evaluate_runs = client.search_runs([client.get_experiment_by_name("minibert-tiny").experiment_id],
                                       filter_string="tags.`minibert.stage` = 'evaluate'", order_by=["attributes.start_time DESC"])
    assert {d.dataset.name for d in evaluate_runs[0].inputs.dataset_inputs} == {"test"}


def test_an_unknown_params_key_fails_with_its_name(project: tuple[Path, str]) -> None:
    dest, _ = project
    params = dest / "params.yaml"
    original = params.read_text()
    try:
        data = yaml.safe_load(original)
        data["finetune"]["epochz"] = 3
        params.write_text(yaml.safe_dump(data))
        out = sh(["dvc", "repro"], dest, check=False)
        assert out.returncode != 0
        assert "unknown key 'finetune.epochz'; did you mean 'finetune.epochs'" in out.stderr + out.stdout
    finally:
        params.write_text(original)


def test_malformed_raw_data_fails_cleanly_and_writes_nothing(project: tuple[Path, str], tmp_path: Path) -> None:
    """A bad label in whichever dataset the workspace's params now name (earlier tests switch it)."""
    dest, _ = project
    raw = tmp_path / "raw"
    (raw / "sst2").mkdir(parents=True)
    (raw / "sst2" / "dev.tsv").write_text("sentence\tlabel\ngood \t1\n")
    (raw / "sst2" / "train.tsv").write_text("sentence\tlabel\nfine \t1\nbroken \tpositive\n")
    shutil.copytree(dest / "data" / "raw" / "imdb", raw / "imdb")
    with gzip.open(raw / "imdb" / "train.jsonl.gz", "wt") as f:
        f.write('{"text": "fine", "label": 1}\n{"text": "broken", "label": "positive"}\n')
    out = sh([sys.executable, "-m", "pipeline.stages.prepare", "--raw", str(raw), "--out", str(tmp_path / "prepared"),
              "--metrics", str(tmp_path / "m.json"), "--report", str(tmp_path / "r.json")], dest, check=False)
    assert out.returncode == 2
    assert re.search(r"error: .*(train\.tsv, line 3|train\.jsonl\.gz, line 2), column 'label': label 'positive' is not one "
                     r"of \['0', '1'\]", out.stderr), out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "m.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["raw"], "no temp files left behind"


def test_a_killed_pretraining_run_resumes_from_its_checkpoint(project: tuple[Path, str], tmp_path: Path) -> None:
    """kill -9 mid-run, rerun: it resumes from the last checkpoint and ends with the same weights
    (byte for byte) and metrics as an uninterrupted run with the same params."""
    dest, _ = project
    params = dest / "profile.yaml"  # the active overlay: its pretrain keys win over params.yaml's
    original = params.read_text()
    data = yaml.safe_load(original)
    data["pretrain"].update(max_steps=400, checkpoint_every=20, time_budget_min=None)
    data["train"].update(log_every=20)
    params.write_text(yaml.safe_dump(data))
    resume = dest / ".minibert" / "resume" / "pretrain.pt"

    def cmd(name: str) -> list[str]:
        return [sys.executable, "-m", "pipeline.stages.pretrain", "--out", str(tmp_path / f"{name}.safetensors"),
                "--metrics", str(tmp_path / f"{name}.json"), "--curves", str(tmp_path / f"{name}.csv")]

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MINIBERT_PARENT_RUN_ID", None)
    try:
        sh(cmd("uninterrupted"), dest)
        proc = subprocess.Popen(cmd("killed"), cwd=dest, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while not resume.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert resume.exists(), "no checkpoint was written before the kill"
        assert not (tmp_path / "killed.safetensors").exists(), "a killed run leaves no model behind"
        sh(cmd("killed"), dest)
        resumed, whole = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("killed", "uninterrupted"))
        assert resumed["resumed_from_step"] >= 20 and resumed["steps"] == 400
        assert not resume.exists(), "the finished run removed its checkpoint"
        timing = {"resumed_from_step", "train_seconds", "ppmi_seconds"}
        assert {k: v for k, v in resumed.items() if k not in timing} == {k: v for k, v in whole.items() if k not in timing}
        assert (tmp_path / "killed.safetensors").read_bytes() == (tmp_path / "uninterrupted.safetensors").read_bytes()
        curves = [pd.read_csv(tmp_path / f"{n}.csv") for n in ("killed", "uninterrupted")]
        assert curves[0]["step"].tolist() == curves[1]["step"].tolist(), "the killed run's points are replayed"
        assert curves[0]["step"].iloc[0] < resumed["resumed_from_step"]
        np.testing.assert_allclose(curves[0]["train_loss"], curves[1]["train_loss"], rtol=1e-6)
        print(f"resumed from step {resumed['resumed_from_step']}: mlm_loss {resumed['mlm_loss']} == {whole['mlm_loss']}")
    finally:
        params.write_text(original)


def test_the_cnn_stage_at_share_0_trains_nothing_and_leaves_no_stale_model(project: tuple[Path, str], tmp_path: Path) -> None:
    """The gpu profile sets `soft_targets.shares.word_cnn: 0`: the stage then writes logit files with the
    teacher's rows and no columns (soft_targets never reads them) and removes a model an earlier run left."""
    dest, _ = project
    shutil.copy(dest / "params.yaml", tmp_path / "params.yaml")
    data = yaml.safe_load((dest / "profile.yaml").read_text())
    data["soft_targets"]["shares"] = {"teacher": 0.7, "tfidf": 0.3, "word_cnn": 0.0}
    data["distill"].update(student_kind="transformer", soup=1)  # the IMDb exp run leaves a word_cnn soup, which needs the CNN
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "cnn"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"an earlier run's model")
    sh(["env", f"MINIBERT_PARAMS={tmp_path / 'params.yaml'}", sys.executable, "-m", "pipeline.stages.cnn",
        "--out", str(out), "--metrics", str(tmp_path / "cnn.json")], dest)
    # rows as the teacher's, whichever task the earlier `dvc exp run`s left in the workspace (IMDb: windows)
    teacher, teacher_transfer = (np.load(dest / "models" / "teacher_logits" / f"{part}.npz")["labels"]
                                 for part in ("train", "transfer"))
    train, transfer = np.load(out / "train.npz"), np.load(out / "transfer.npz")
    np.testing.assert_array_equal(train["labels"], teacher)
    assert train["logits"].shape == (len(teacher), 0) and transfer["logits"].shape == (len(teacher_transfer), 0)
    assert len(teacher_transfer) >= 200
    assert not (out / "model.safetensors").exists()
    metrics = json.loads((tmp_path / "cnn.json").read_text())
    assert metrics["skipped"] and metrics["rows"] == len(teacher) and "val_accuracy" not in metrics
