"""The promotion gate: the decision rule, then promote / rollback / predict against a real local
registry with served pyfunc versions, and two promotions racing each other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import toy_texts, toy_tokenizer
from servers import free_port

from minibert import ClassifierConfig, ModelConfig, build_classifier
from minibert.batching import pad_batch
from minibert.contract import Contract, Windows, stamp_onnx
from minibert.export import export_onnx
from minibert.tokenizer import encode
from pipeline.params import PromoteParams
from pipeline.promotion import Decision, Scores, decide

mlflow = pytest.importorskip("mlflow")
ROOT = Path(__file__).resolve().parent.parent
NAME = "minibert-sst2"
CLASSES = ("negative", "positive")  # what the toy models' contracts name


@pytest.mark.parametrize("challenger, champion, cfg, promote, reason", [
    (Scores("2", 0.80, 1.0, 0.80), None, PromoteParams(), True, "no champion"),
    (Scores("2", 0.80, 1.0, 0.80), Scores("1", 0.80, 1.0, 0.80), PromoteParams(), True, ">="),
    (Scores("2", 0.79, 1.0, 0.79), Scores("1", 0.80, 1.0, 0.80), PromoteParams(), False, "<"),
    (Scores("2", 0.79, 1.0, 0.79), Scores("1", 0.80, 1.0, 0.80), PromoteParams(margin=0.02), True, "margin 0.02"),
    (Scores("2", 0.80, 1.0, 0.80), Scores("1", 0.79, 1.0, 0.79), PromoteParams(margin=-0.02), False, "margin -0.02"),
    (Scores("2", 0.90, 9.0, 0.90), Scores("1", 0.80, 1.0, 0.80), PromoteParams(max_p50_ms=5.0), False, "over the budget"),
    (Scores("1", 0.90, 1.0, 0.90), Scores("1", 0.90, 1.0, 0.90), PromoteParams(), False, "already the champion"),
    (Scores("2", 0.90, 1.0, 0.60), Scores("1", 0.88, 1.0, 0.70), PromoteParams(), True, "accuracy 0.9000 >="),
    (Scores("2", 0.90, 1.0, 0.60), Scores("1", 0.88, 1.0, 0.70), PromoteParams(metric="macro_f1"), False,
     "macro_f1 0.6000 < champion v1's 0.7000"),
])
def test_decision_rule(challenger, champion, cfg, promote: bool, reason: str) -> None:
    decision = decide(challenger, champion, cfg)
    assert isinstance(decision, Decision) and decision.promote is promote and reason in decision.reason


def env_for(root: Path) -> dict[str, str]:
    """The CLI's environment: the project folder, and the tracking backend the test chose."""
    env = {k: v for k, v in os.environ.items() if k != "MINIBERT_PARENT_RUN_ID"}
    env.update(DVC_ROOT=str(root), MLFLOW_DISABLE_TELEMETRY="true", PYTHONPATH=str(ROOT),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")  # uvicorn, dvc
    return env


def cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=root, env=env_for(root),
                         capture_output=True, text=True, timeout=300)
    if check and out.returncode != 0:
        raise AssertionError(f"minibert {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def split_along_main_direction(model, sequences: list[list[int]]) -> None:
    """Set the classifier so that its label splits ``sequences`` around the mean of their pooled
    features along the first principal direction: a random encoder that still tells texts apart."""
    with torch.no_grad():
        ids, mask = pad_batch(sequences, 0)
        hidden, _ = model.backbone(ids, mask)
        pooled = torch.tanh(model.head.pooler(model.head.pool(hidden, mask.bool())))  # (N, C)
        mean = pooled.mean(0)
        direction = torch.linalg.svd(pooled - mean, full_matrices=False).Vh[0]
        model.head.classifier.weight.copy_(torch.stack([-direction, direction]) * 50)
        model.head.classifier.bias.copy_(torch.stack([mean @ direction, -(mean @ direction)]) * 50)


@pytest.fixture()
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracking_backend: str):
    """A project folder with params, a toy test split and versions 1 (random), 2 (the labels' own
    model: accuracy 1.0) and 3 (random, the same weights as 1), v1 the champion; in the project's
    sqlite registry, or on the PostgreSQL-backed tracking server."""
    from pipeline import tracking
    from pipeline.packaging import SERVING_CODE, pip_requirements
    from pipeline.stages.register import INFERENCE_PARAMS

    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(ROOT / "profiles" / "tiny.yaml", tmp_path / "profile.yaml")
    tok, tok_path = toy_tokenizer(tmp_path)
    texts = toy_texts(np.random.default_rng(5), [3, 4, 5, 6] * 15)  # one window each
    paths = {}
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = build_classifier(ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64),
                                 ClassifierConfig(pooling="mean")).eval()
        split_along_main_direction(model, encode(tok, texts, 16))
        paths[seed] = export_onnx(model, tmp_path / f"m{seed}.onnx")
        # temperature 50 undoes split_along_main_direction's x50: served probabilities stay below 1.0, so a
        # min_confidence of 1 (or the median) abstains whatever the toy tokenizer's ids (its WordPiece ties break
        # differently run to run; logits x50 saturated float32's softmax on some runs)
        stamp_onnx(paths[seed], Contract("classifier", None, Windows(16, 6, "mean"), CLASSES, temperature=50.0))
    tracking.configure("minibert-tiny", tmp_path)
    versions = []
    for seed in (0, 1, 0):
        with mlflow.start_run():
            versions.append(tracking.log_pyfunc_model(
                name="model", python_model=str(SERVING_CODE), artifacts={"onnx": str(paths[seed]), "tokenizer": str(tok_path)},
                pip_requirements=pip_requirements(), input_example=(pd.DataFrame({"text": ["a film"]}), INFERENCE_PARAMS),
                registered_model_name=NAME, model_config={"max_length": 16, "stride": 6, "aggregate": "mean", "threads": 1},
                tags={}))
    assert versions == ["1", "2", "3"]
    tracking.set_aliases(NAME, "1", ["champion"])
    tracking.set_aliases(NAME, "3", ["challenger"])
    named = tracking.served_predict(f"models:/{NAME}/2")(pd.DataFrame({"text": texts}))["label"]
    labels = np.array([CLASSES.index(name) for name in named])
    assert 0.2 < labels.mean() < 0.8, "both classes in the toy test split"
    (tmp_path / "data" / "prepared").mkdir(parents=True)
    pd.DataFrame({"text": texts, "label": labels}).to_parquet(tmp_path / "data" / "prepared" / "test.parquet")
    (tmp_path / "data" / "prepared" / "dataset.json").write_text(json.dumps(
        {"labels": list(CLASSES), "intermediate": None}))
    return tmp_path, tracking


def test_promote_refuse_and_roll_back(registry) -> None:
    root, tracking = registry
    out = cli(root, "promote", "--version", "2")
    assert out.stdout.startswith("promoted: accuracy 1.0000 >= champion v1's")
    assert tracking.alias_version(NAME, "champion") == "2"
    tags = tracking.version_tags(NAME, "2")
    assert tags["promotion.decision"] == "promoted" and tags["previous_champion"] == "1"
    refused = cli(root, "promote", "--strict", check=False)  # the challenger alias: v3, weaker than v2
    assert refused.returncode == 1 and refused.stdout.startswith("refused: accuracy")
    assert tracking.alias_version(NAME, "champion") == "2"
    assert tracking.version_tags(NAME, "3")["promotion.decision"] == "refused"
    assert cli(root, "rollback").stdout.strip() == "champion -> version 1"
    assert tracking.alias_version(NAME, "champion") == "1"
    second = cli(root, "rollback", check=False)
    assert second.returncode == 2 and "records no previous champion" in second.stderr
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("minibert-tiny").experiment_id
    runs = client.search_runs([experiment], filter_string="tags.`minibert.stage` = 'promote'")
    assert sorted(r.data.metrics["promoted"] for r in runs) == [0.0, 1.0]
    assert all("champion_accuracy" in r.data.metrics for r in runs)


def test_predict_reads_the_champion_and_names_a_missing_alias(registry, tmp_path: Path) -> None:
    root, _ = registry
    lines = cli(root, "predict", "a moving film", "dull script").stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.split("\t")[0] in CLASSES for line in lines)
    for line in lines:  # label, its probability, every class's, the text
        label, probability, every, _ = line.split("\t")
        shares = dict(pair.split("=") for pair in every.split())
        assert list(shares) == list(CLASSES) and float(shares[label]) == float(probability) >= 0.5
        assert sum(map(float, shares.values())) == pytest.approx(1.0, abs=2e-4)
    cautious = cli(root, "predict", "--min-confidence", "1", "a moving film").stdout.split("\t")
    assert cautious[0] == "abstain" and cautious[3].strip() == "a moving film", "below the threshold: no class"
    bad = cli(root, "predict", "--min-confidence", "1.5", "x", check=False)
    assert bad.returncode == 2 and "'1.5' is not a probability" in bad.stderr
    texts = root / "texts.txt"
    texts.write_text("one fine film\n\nthin plot\n")
    assert len(cli(root, "predict", "--file", str(texts)).stdout.strip().splitlines()) == 2
    missing = cli(root, "predict", "--alias", "gold", "x", check=False)
    assert missing.returncode == 2 and "models:/minibert-sst2@gold: not in the registry" in missing.stderr
    empty = cli(root, "predict", check=False)
    assert empty.returncode == 2 and "nothing to predict" in empty.stderr
    blank = cli(root, "predict", "fine", "  ", check=False)
    assert blank.returncode == 2 and "error: text argument 2 is empty" in blank.stderr and blank.stdout == ""
    latin = root / "latin.txt"
    latin.write_bytes("good\ncaf\xe9\n".encode("latin-1"))
    refused = cli(root, "predict", "--file", str(latin), check=False)
    assert refused.returncode == 2 and "latin.txt, line 2: byte 0xe9 at column 4 is not UTF-8" in refused.stderr


def test_predict_labels_ten_thousand_lines_and_a_100k_character_text(registry, tmp_path: Path) -> None:
    root, _ = registry
    rng = np.random.default_rng(1)
    many = root / "many.txt"
    texts = toy_texts(rng, rng.integers(1, 40, size=10_000))
    many.write_text("\n".join(texts) + "\n")
    lines = cli(root, "predict", "--file", str(many)).stdout.splitlines()
    assert len(lines) == 10_000 and [line.split("\t", 3)[3] for line in lines] == texts
    assert all(line.split("\t")[0] in CLASSES and 0.5 <= float(line.split("\t")[1]) <= 1 for line in lines)
    long_text = " ".join(toy_texts(rng, [20_000]))[:100_000]
    (label, probability, _, text), = [line.split("\t") for line in cli(root, "predict", long_text).stdout.splitlines()]
    assert label in CLASSES and 0.5 <= float(probability) <= 1 and len(text) == 100_000


def test_two_promotions_at_once_leave_a_consistent_registry(registry) -> None:
    root, tracking = registry
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline.cli", "promote", "--version", v], cwd=root,
                              env=env_for(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for v in ("3", "2")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert tracking.alias_version(NAME, "champion") == "2", "the best version wins whatever the order"
    # Every promotion recorded the champion it replaced, so the chain walks back to v1 without gaps.
    chain, version = [], "2"
    while version:
        chain.append(version)
        version = tracking.version_tags(NAME, version).get("previous_champion", "")
    assert chain in (["2", "1"], ["2", "3", "1"]), chain


def test_mlflow_models_serve_answers_http_with_the_champions_predictions(registry) -> None:
    import signal
    import time
    import urllib.request

    root, tracking = registry
    texts = ["a moving , funny film", "dull script , thin plot", "", "wonderful performances " * 40]
    expected = tracking.served_predict(f"models:/{NAME}@champion")(pd.DataFrame({"text": texts}))
    port = free_port()
    env = {**env_for(root), "MLFLOW_TRACKING_URI": os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"}
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/{NAME}@champion",
                               "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            assert server.poll() is None, f"server exited: {server.stderr.read()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{base}/ping", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "mlflow models serve did not become healthy in 180 s"
            time.sleep(1)
        def answers(extra: dict) -> list[dict]:
            body = json.dumps({"dataframe_split": {"columns": ["text"], "data": [[t] for t in texts]}, **extra}).encode()
            request = urllib.request.Request(f"{base}/invocations", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["predictions"]

        predictions = answers({})
        threshold = float(np.median(expected["probability"]))  # abstain below it: the inference param over HTTP
        cautious = answers({"params": {"min_confidence": threshold}})
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert [p["label"] for p in predictions] == expected["label"].tolist()
    np.testing.assert_allclose([p["probability"] for p in predictions], expected["probability"], rtol=1e-6)
    for name in CLASSES:  # every class's probability over HTTP too
        np.testing.assert_allclose([p[f"p_{name}"] for p in predictions], expected[f"p_{name}"], rtol=1e-6)
    local = tracking.served_predict(f"models:/{NAME}@champion")(pd.DataFrame({"text": texts}),
                                                                  params={"min_confidence": threshold})
    assert [p["label"] for p in cautious] == local["label"].tolist() and "abstain" in local["label"].tolist()


def test_register_refuses_a_deployed_model_below_its_floor_or_missing(tmp_path: Path) -> None:
    from pipeline.io import DataError
    from pipeline.model_card import DEPLOYED
    from pipeline.params import RegisterParams
    from pipeline.stages.register import run

    where = tmp_path / "evaluate.json"
    evaluation = {DEPLOYED: {"accuracy": 0.8512}, "teacher": {"accuracy": 0.9}}
    assert run(RegisterParams(min_accuracy=0.85), evaluation, where) == {"accuracy": 0.8512}
    with pytest.raises(DataError, match=r"test accuracy 0\.8512 is below register\.min_accuracy=0\.86; not registering"):
        run(RegisterParams(min_accuracy=0.86), evaluation, where)
    with pytest.raises(DataError, match=rf"evaluate\.json: no '{DEPLOYED}' entry; rerun `dvc repro evaluate`"):
        run(RegisterParams(), {"teacher": {"accuracy": 0.9}}, where)
