"""Data-parallel training under torchrun (2 processes, gloo on CPU): the weights after N steps
equal a single-process run with the same global batch, gradient accumulation syncs once a step,
and only rank 0 logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import toy_tokenizer
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "workers" / "ddp_train.py"
TOLERANCE = 1e-5  # float32 sums in another order (two shards, then an all-reduce)

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")


def train(out: Path, processes: int, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    tokenizer = out.parent / "tokenizer.json"
    if not tokenizer.exists():
        toy_tokenizer(out.parent)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else [sys.executable]
    command = [*launcher, str(WORKER), "--out", str(out), "--tokenizer", str(tokenizer), *extra]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # a hung run must not outlive its test
            proc.terminate()  # torchrun stops its workers on SIGTERM (they run in sessions of their own)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            raise
    result = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    assert result.returncode == 0 or not check, result.stderr[-4000:]
    return result


def test_two_processes_end_with_the_weights_of_one_with_the_same_global_batch(tmp_path: Path) -> None:
    train(tmp_path / "one", 1)
    train(tmp_path / "two", 2)
    single, ddp = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("one", "two"))
    for name, tensor in single.items():
        assert torch.allclose(ddp[name], tensor, atol=TOLERANCE, rtol=0), f"{name}: {float((ddp[name] - tensor).abs().max())}"
    assert json.loads((tmp_path / "two" / "result.json").read_text()) == {"steps": 12, "world": 2}
    logged = [json.loads(line) for line in (tmp_path / "two" / "log.rank0.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "train_loss" in row] == list(range(1, 13))
    assert not (tmp_path / "two" / "log.rank1.jsonl").exists(), "rank 1 logged"
    ones = [json.loads(line) for line in (tmp_path / "one" / "log.rank0.jsonl").read_text().splitlines()]
    for a, b in zip(ones, logged):  # the same loss curve, step by step
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-4


def test_a_killed_two_process_run_resumes_and_ends_like_an_uninterrupted_one(tmp_path: Path) -> None:
    """Rank 0 dies before step 7 (torchrun then stops rank 1); the rerun resumes both ranks from
    the step-4 checkpoint (model, optimizer, schedule, each rank's data position and RNG)."""
    train(tmp_path / "whole", 2)
    checkpoint = tmp_path / "resume.pt"
    crashed = train(tmp_path / "killed", 2, "--checkpoint", str(checkpoint), "--crash-at", "6", check=False)
    assert crashed.returncode != 0 and checkpoint.exists() and not (tmp_path / "killed" / "model.safetensors").exists()
    train(tmp_path / "killed", 2, "--checkpoint", str(checkpoint))
    assert (tmp_path / "killed" / "resumed_from.txt").read_text() == "4"
    assert not checkpoint.exists(), "a finished run removes its checkpoint"
    whole, resumed = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("whole", "killed"))
    for name, tensor in whole.items():
        assert torch.equal(resumed[name], tensor), name
    refused = train(tmp_path / "other", 1, "--checkpoint", str(_leftover(tmp_path)), check=False)
    assert refused.returncode != 0 and "was written by a run of 2 process(es), this one has 1" in refused.stderr


def test_two_processes_read_one_budget_clock(tmp_path: Path) -> None:
    """A schedule on the budget clock: rank 1's clock runs fast, its budget is twice rank 0's and its
    evaluations take longer (the time kept back for the final one), yet both stop and set their LR
    on rank 0's budget, clock and evaluation time, so they end with the same weights, bit for bit
    (on their own clocks they would stop at different steps, and one would hang)."""
    train(tmp_path / "two", 2, "--budget", "1.5", "--steps", "100000")
    rank0, rank1 = (load_file(str(tmp_path / "two" / f"model.rank{r}.safetensors")) for r in (0, 1))
    for name, tensor in rank0.items():
        assert torch.equal(rank1[name], tensor), name
    rows = [json.loads(line) for line in (tmp_path / "two" / "log.rank0.jsonl").read_text().splitlines()]
    lrs = [row["lr"] for row in rows if "lr" in row]
    assert sum("eval_score" in row for row in rows) >= 2, "evaluations ran, and were timed"
    assert len(lrs) >= 5 and max(lrs) > 5 * lrs[-1], "the decay ends with the budget"


def _leftover(tmp_path: Path) -> Path:
    """A 2-process checkpoint left behind by a killed run."""
    checkpoint = tmp_path / "leftover.pt"
    train(tmp_path / "leftover", 2, "--checkpoint", str(checkpoint), "--crash-at", "6", check=False)
    assert checkpoint.exists()
    return checkpoint


def mlflow_runs(root: Path, stage: str) -> list[tuple[str, str]]:
    import sqlite3

    with sqlite3.connect(root / "mlflow.db") as db:
        return db.execute("SELECT run_uuid, status FROM runs WHERE name = ? ORDER BY start_time", (stage,)).fetchall()


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["pretrain", "finetune"])
def test_a_stage_runs_unchanged_under_torchrun_and_only_rank_0_logs(stage_project: Path, tmp_path: Path, stage: str) -> None:
    root = stage_project
    args = {"pretrain": ["--corpus", root / "data/prepared/corpus.parquet", "--tokenizer", root / "models/tokenizer.json",
                         "--resume", tmp_path / "resume.pt"],
            "finetune": ["--data", root / "data/prepared", "--tokenizer", root / "models/tokenizer.json",
                         "--pretrained", root / "models/pretrain.safetensors"]}[stage]
    before = mlflow_runs(root, stage)
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MINIBERT_PARENT_RUN_ID")}
    env.update(DVC_ROOT=str(root), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                          f"pipeline.stages.{stage}", *map(str, args), "--out", str(tmp_path / "model.safetensors"),
                          "--metrics", str(tmp_path / "metrics.json")], cwd=root, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["steps"] >= 1
    assert (tmp_path / "model.safetensors").is_file()
    new = [run for run in mlflow_runs(root, stage) if run not in before]
    assert [status for _, status in new] == ["FINISHED"], f"one run, opened by rank 0 only: {new}"


def test_the_launcher_runs_one_process_in_place_and_several_under_torchrun() -> None:
    from pipeline.launch import command

    assert command(1, "pipeline.stages.pretrain", ["--out", "m"]) is None
    assert command(4, "pipeline.stages.finetune", ["--out", "m"])[1:] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", "-m", "pipeline.stages.finetune", "--out", "m"]
    with pytest.raises(SystemExit, match="need at least 1"):
        command(0, "pipeline.stages.pretrain", [])
