"""Retraining that follows the data, end to end: a Prefect server on loopback serving the retrain flow as a
scheduled deployment over a small dataset of real TREC questions, whose first run registers the champion; then two
drops of new rows (`minibert data append`), each followed by a run of the deployment, the first promoted, the second
(labels rotated on purpose) refused. Its own copy of the project (no fixture run: the first run of the deployment
builds everything), so that it runs beside tests/test_pipeline_e2e.py on the other pytest worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from projects import LOCAL_ONLY, REMOTE, ROOT, STAGES, client_for, copy_project, runs_by_parent, sh
from servers import background, free_port, healthy, wait_until

TREC = ROOT.parent / "shared" / "data" / "trec"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not REMOTE.is_dir() or not TREC.is_dir(), reason=f"data mirror {REMOTE} or {TREC} not present"),
]

# The retraining test's small dataset: real TREC questions (6 classes) where the tiny profile's word-CNN student learns
# in seconds. The drops are sized so that the gate's decisions stand above the spread of training itself (another
# host's kernels or another seed give another trajectory): five times the first data, then more rotated labels than
# right ones, move its accuracy by tens of points (benchmarks/JOURNAL.md, "The retraining test's drops").
DROPS = {"profile": {"data": {"dataset": "drops"}, "register": {"model_name": "minibert-drops"},
                     "prepare": {"max_train_rows": None, "max_dev_rows": None},
                     "cnn": {"filters": 16, "epochs": 4.0, "lr": 0.003},
                     "distill": {"student_kind": "word_cnn", "hidden_weight": 0.0, "attention_weight": 0.0, "epochs": 2.0,
                                 "lr": 0.002, "soup": 1},
                     "soft_targets": {"shares": {"teacher": 0.0, "tfidf": 0.5, "word_cnn": 0.5}},
                     "transfer_set": {"rows": 0}, "promote": {"margin": 0.02}, "tracking": {"experiment": "minibert-drops"}}}


def deep_merge(base: dict, extra: dict) -> dict:
    return {**base, **{k: deep_merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                       for k, v in extra.items()}}


def trec_drops(folder: Path) -> dict[str, Path]:
    """The first export (400 training questions and TREC's test), a clean drop of 1,600 more, and a drop of 2,800
    whose labels are each rotated to the next class: made worse on purpose (more wrong rows than right ones)."""
    train = pd.read_csv(TREC / "train.csv").sample(frac=1.0, random_state=0)
    classes = sorted(train["category"].unique())
    rotated = train.iloc[2000:4800].assign(category=lambda d: d["category"].map(
        {c: classes[(i + 1) % len(classes)] for i, c in enumerate(classes)}))
    files = {"first/train.csv": train.iloc[:400], "first/test.csv": pd.read_csv(TREC / "test.csv"),
             "clean/train-2026-11.csv": train.iloc[400:2000], "noisy/train-2026-12.csv": rotated}
    for name, table in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(folder / name, index=False)
    return {name: folder / name for name in files}


def test_a_scheduled_deployment_retrains_on_each_data_drop_and_the_gate_promotes_or_refuses(tmp_path: Path) -> None:
    """`prefect server start` on loopback, `minibert schedule` serving the retrain flow as a deployment with a cron
    schedule, and a small dataset (`minibert data add`) whose first run registers the champion. Then two drops of new
    rows (`minibert data append`), each followed by a run of the deployment: DVC sees the new data digest and reruns
    every stage (each depends on the data), the flow logs what changed beside the gate's decision, and the gate
    promotes the clean drop's model and refuses the noisy drop's (the champion stays)."""
    from pipeline.cli import profile_text
    from pipeline.datasets import normalise

    dest = copy_project(tmp_path / "project")
    profile = dest / "profile.yaml"  # the active overlay: the tiny profile's, with the drops dataset
    files = trec_drops(tmp_path)
    sh([sys.executable, "-m", "pipeline.cli", "data", "add", str(files["first/train.csv"]), str(files["first/test.csv"]),
        "--text", "question", "--label", "category", "--name", "drops"], dest)
    tiny = yaml.safe_load((dest / "profiles" / "tiny.yaml").read_text())
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_ONLY}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", PREFECT_HOME=str(tmp_path / "prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false", DVC_NO_ANALYTICS="1",
               MLFLOW_DISABLE_TELEMETRY="true")
    served = {**env, "PREFECT_API_URL": api}
    mlflow, client = client_for(dest)

    def deployed() -> bool:
        return subprocess.run(["prefect", "deployment", "inspect", "minibert-retrain/ci"], cwd=dest, env=served,
                              capture_output=True).returncode == 0

    def trigger() -> tuple[str, list[str], dict]:
        """A run of the deployment: the version it registered, the stages it ran, its parent run's data record."""
        experiment = client.get_experiment_by_name("minibert-drops")
        before = {r.info.run_id for r in client.search_runs([experiment.experiment_id])} if experiment else set()
        out = subprocess.run(["prefect", "deployment", "run", "minibert-retrain/ci", "--watch", "--watch-timeout", "600"],
                             cwd=dest, env=served, capture_output=True, text=True, timeout=660)
        assert out.returncode == 0 and "Completed" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
        exp_id = client.get_experiment_by_name("minibert-drops").experiment_id
        (parent,) = [r for r in client.search_runs([exp_id], filter_string="tags.`minibert.entry` = 'prefect'")
                     if r.info.run_id not in before]
        stages = [r.data.tags["minibert.stage"] for r in runs_by_parent(client, "minibert-drops")[parent.info.run_id]]
        record = mlflow.artifacts.load_dict(f"runs:/{parent.info.run_id}/data_change.json")
        assert parent.data.tags["minibert.data_digest"] == record["raw_digest"]
        return str(client.get_model_version_by_alias("minibert-drops", "challenger").version), stages, record

    def champion() -> str:
        return str(client.get_model_version_by_alias("minibert-drops", "champion").version)

    def digest() -> str:
        return "md5:" + yaml.safe_load((dest / "data" / "raw" / "drops.dvc").read_text())["outs"][0]["md5"]

    profile.write_text(profile_text(deep_merge(tiny, DROPS["profile"]), dest / "params.yaml"))
    with background(["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)], dest, env,
                    tmp_path / "server.log") as server:
        wait_until(lambda: healthy(f"{api}/health"), "prefect server", tmp_path / "server.log")
        refused = subprocess.run([sys.executable, "-m", "pipeline.cli", "schedule", "--cron", "0 4 * * 1"], cwd=dest,
                                 env=env, capture_output=True, text=True)
        assert refused.returncode == 2 and "schedules need a Prefect server" in refused.stderr
        with background([sys.executable, "-m", "pipeline.cli", "schedule", "--name", "ci", "--cron", "0 4 * * 1"],
                        dest, served, tmp_path / "serve.log") as serve:
            wait_until(deployed, "deployment minibert-retrain/ci", tmp_path / "serve.log")
            shown = subprocess.run(["prefect", "deployment", "inspect", "minibert-retrain/ci"], cwd=dest, env=served,
                                   capture_output=True, text=True).stdout
            assert "'cron': '0 4 * * 1'" in shown and "'timezone': 'UTC'" in shown

            first, ran, _ = trigger()  # the new dataset's first model: there is no champion yet
            assert ran == STAGES and champion() == first
            first_digest = digest()
            before = set(pd.read_parquet(dest / "data" / "prepared" / "train.parquet")["text"])

            sh([sys.executable, "-m", "pipeline.cli", "data", "append", "drops", str(files["clean/train-2026-11.csv"])], dest)
            clean, ran, record = trigger()
            assert ran == STAGES, "a new data digest: prepare and everything that reads the data rerun"
            change = record["change"]
            assert record["raw_digest"] != record["raw_digest_before"] and digest() != first_digest
            trained = set(pd.read_parquet(dest / "data" / "prepared" / "train.parquet")["text"])
            drop = pd.read_csv(files["clean/train-2026-11.csv"]).assign(question=lambda d: d["question"].map(normalise))
            # new to training: the rest went to the carved validation split, or was there already
            landed = drop[drop["question"].isin(trained - before)].drop_duplicates("question")
            assert change["rows_added"] == len(landed) > 0.8 * len(drop) and change["rows_removed"] == 0 and not change["test_changed"]
            assert change["added_per_class"] == landed["category"].value_counts().reindex(
                ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"], fill_value=0).to_dict()
            assert 0 < change["new_vocabulary_rate"] < 1 and change["label_shift"] < 0.1
            tags = client.get_model_version("minibert-drops", clean).tags
            assert tags["promotion.decision"] == "promoted" and champion() == clean, tags
            assert tags["data.rows_added"] == str(change["rows_added"]) and tags["data.digest"] == record["raw_digest"]
            lineage = json.loads(sh([sys.executable, "-m", "pipeline.cli", "lineage", "models:/minibert-drops@champion"],
                                    dest).stdout)
            assert lineage["data_digests"]["data/raw/drops"] == digest(), "the version names the new data"

            sh([sys.executable, "-m", "pipeline.cli", "data", "append", "drops", str(files["noisy/train-2026-12.csv"])], dest)
            noisy, ran, record = trigger()
            assert ran == STAGES and noisy not in (first, clean)
            tags = client.get_model_version("minibert-drops", noisy).tags
            assert tags["promotion.decision"] == "refused" and "< champion" in tags["promotion.reason"], tags
            assert champion() == clean, "the champion stays"
            assert float(tags["data.label_shift"]) > 0.05 and int(tags["data.rows_added"]) > 2000, tags
            assert float(tags["promotion.accuracy"]) < float(client.get_model_version("minibert-drops", clean)
                                                             .tags["promotion.accuracy"]) - 0.02
            assert serve.poll() is None and server.poll() is None, "server and deployment stay up between runs"
