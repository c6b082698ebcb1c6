"""Shared fixtures: deterministic seeds and offline settings for every test."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

# Under pytest-xdist (`make test` runs 2 workers), each worker and the stage processes it starts get
# their share of the cores: oversubscribed OpenMP threads spin against each other.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _SHARE = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_SHARE))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that run whole pipelines (``*_e2e``, then the rest marked ``slow``) first, each module's tests
    kept together: `make test` hands modules to its two workers in this order (``--no-loadscope-reorder``; xdist's
    own order, by test count, put the one-test retraining module last, its 7 minutes the suite's tail)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if item.path.stem.endswith("_e2e") else 1 if item.path in slow else 2)  # stable


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def padded_batch(vocab_size: int, lengths: list[int], pad_to: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) with real ids in [5, vocab) and pad id 0, and the 1/0 mask (B, T)."""
    t = pad_to or max(lengths)
    ids = torch.zeros(len(lengths), t, dtype=torch.long)
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, vocab_size, (n,))
        mask[row, :n] = 1
    return ids, mask


WORDS = ("the film is a charming funny moving portrait of family dull lifeless script thin wonderful "
         "performances bored actors plot sense dialogue laughable director vision clumsy act").split()


def toy_texts(rng, lengths) -> list[str]:
    """Review-like word salads of the given word counts (from a fixed movie-review vocabulary)."""
    return [" ".join(rng.choice(WORDS, size=n)) for n in lengths]


def toy_classifier(tok, pooling: str = "mean"):
    """A random tiny classifier (seed 0, 64 positions) over ``tok``'s vocabulary, in eval mode."""
    from minibert import ClassifierConfig, ModelConfig, build_classifier

    torch.manual_seed(0)
    return build_classifier(ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64),
                            ClassifierConfig(pooling=pooling)).eval()


def toy_tokenizer(folder):
    """A 120-token WordPiece trained on 300 word salads, saved to ``folder``: (tokenizer, path)."""
    import numpy as np

    from minibert.tokenizer import TokenizerConfig, save_tokenizer, train_wordpiece

    corpus = toy_texts(np.random.default_rng(0), [12] * 300)
    tok = train_wordpiece(iter(corpus), TokenizerConfig(vocab_size=120, min_frequency=1))
    return tok, save_tokenizer(tok, folder / "tokenizer.json")


ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"


def run_stage(root: Path, stage: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MINIBERT_PARENT_RUN_ID")}
    env.update(DVC_ROOT=str(root), PYTHONPATH=str(ROOT), MLFLOW_DISABLE_TELEMETRY="true")
    return subprocess.run([sys.executable, "-m", f"pipeline.stages.{stage}", *map(str, args)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def jsonl_gz(path: Path, rows: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def read_jsonl_gz(path: Path, every: int) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for i, line in enumerate(f) if i % every == 0]


@pytest.fixture(scope="session")
def stage_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small project folder (tiny profile, a few hundred real SST-2 / IMDb rows from ../shared/data)
    after prepare, tokenizer and pretrain, for tests that run single stages."""
    if not (SHARED / "sst2").is_dir():
        pytest.skip(f"{SHARED} not present")
    root = tmp_path_factory.mktemp("bad") / "project"
    raw = root / "data" / "raw"
    (raw / "sst2").mkdir(parents=True)
    (raw / "imdb").mkdir()
    for name, lines in (("train.tsv", 700), ("dev.tsv", 200)):
        with open(SHARED / "sst2" / name, encoding="utf-8") as f:
            (raw / "sst2" / name).write_text("".join(line for _, line in zip(range(lines), f)), encoding="utf-8")
    for name, every in (("train", 100), ("test", 100), ("unsup", 200)):  # evenly spaced: both labels
        jsonl_gz(raw / "imdb" / f"{name}.jsonl.gz", read_jsonl_gz(SHARED / "imdb" / f"{name}.jsonl.gz", every))
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(ROOT / "datasets", root / "datasets")
    shutil.copy(ROOT / "profiles" / "tiny.yaml", root / "profile.yaml")  # the tiny profile, active
    shutil.copy(ROOT / "dvc.yaml", root / "dvc.yaml")  # each stage's run records the params it declares there
    for stage, args in (("prepare", ["--raw", raw, "--out", root / "data/prepared", "--metrics", root / "m/prepare.json",
                                     "--report", root / "reports/data.json"]),
                        ("tokenizer", ["--data", root / "data/prepared", "--out", root / "models/tokenizer.json",
                                       "--metrics", root / "m/tokenizer.json"]),
                        ("pretrain", ["--corpus", root / "data/prepared/corpus.parquet", "--tokenizer",
                                      root / "models/tokenizer.json", "--out", root / "models/pretrain.safetensors",
                                      "--metrics", root / "m/pretrain.json"])):
        out = run_stage(root, stage, *args)
        assert out.returncode == 0, f"{stage} failed:\n{out.stderr[-3000:]}"
    return root


def last_run_status(root: Path, stage: str) -> str | None:
    """Status of the newest MLflow run of ``stage`` in the project's store (None: no run)."""
    import sqlite3

    with sqlite3.connect(root / "mlflow.db") as db:
        row = db.execute("SELECT status FROM runs WHERE name = ? ORDER BY start_time DESC LIMIT 1", (stage,)).fetchone()
    return row[0] if row else None


@pytest.fixture(scope="session")
def mlflow_on_postgres(tmp_path_factory: pytest.TempPathFactory):
    """An MLflow tracking server on 127.0.0.1 backed by a throwaway PostgreSQL cluster; its URI."""
    from servers import mlflow_server, postgres, postgres_bin

    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (.ci/run installs it)")
    with postgres() as database, mlflow_server(database, tmp_path_factory.mktemp("mlflow-server")) as uri:
        yield uri


@pytest.fixture(params=["sqlite", "postgres"])
def tracking_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that takes it runs twice: on the embedded default (the project's sqlite file, no
    MLFLOW_TRACKING_URI) and against a tracking server on PostgreSQL. On the server, the
    experiments and the registered model the tests use are moved out of the way first, so every
    test starts from an empty registry."""
    if request.param == "sqlite":
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        return "sqlite"
    import uuid

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = request.getfixturevalue("mlflow_on_postgres")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    for name in ("minibert", "minibert-tiny"):
        found = client.get_experiment_by_name(name)
        if found is not None:
            client.rename_experiment(found.experiment_id, f"{name}-done-{uuid.uuid4().hex[:8]}")
    with contextlib.suppress(MlflowException):
        client.delete_registered_model("minibert-sst2")
    return "postgres"
