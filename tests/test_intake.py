"""`minibert data add` / `data check`: a team's export brought in as a user would, byte for byte under DVC, with
its description written beside; bad files refused in one line with nothing written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import SHARED

from pipeline import datasets

ROOT = Path(__file__).resolve().parent.parent
TREC = SHARED / "trec"

pytestmark = pytest.mark.skipif(not (TREC / "train.csv").is_file(), reason=f"{TREC} not present")


def minibert(project: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DVC_ROOT")}
    env.update(PYTHONPATH=str(ROOT), DVC_NO_ANALYTICS="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=project, env=env, capture_output=True,
                         text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """An empty project: git and DVC initialised, params.yaml, no datasets yet."""
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([str(Path(sys.executable).parent / "dvc"), "init", "-q"], cwd=root, check=True)
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    return root


def written(project: Path) -> list[str]:
    """What a refused command must not have left: anything under data/ or datasets/."""
    return sorted(str(p.relative_to(project)) for folder in ("data", "datasets") if (project / folder).exists()
                  for p in (project / folder).rglob("*"))


def test_trec_is_added_byte_for_byte_with_the_mirrors_dvc_digest(project: Path) -> None:
    out = minibert(project, "data", "add", str(TREC / "train.csv"), str(TREC / "test.csv"), "--text", "question",
                   "--label", "category")
    assert "trec: 6 classes (ABBR, DESC, ENTY, HUM, LOC, NUM)" in out.stdout
    assert "train in test 10" in out.stdout, "TREC's ten test questions also in train leave train, counted"
    for name in ("train.csv", "test.csv"):
        assert (project / "data/raw/trec" / name).read_bytes() == (TREC / name).read_bytes()
    ours = yaml.safe_load((project / "data/raw/trec.dvc").read_text())["outs"][0]
    mirror = yaml.safe_load((SHARED / "dvc" / "trec.dvc").read_text())["outs"][0]
    assert ours["md5"] == mirror["md5"] and ours["nfiles"] == 2, "the same digest as the remote's copy: dvc pull finds it"
    spec = datasets.load("trec", project / "datasets")
    assert spec.class_names == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    assert spec.files.train == ("trec/train.csv",) and spec.files.test == ("trec/test.csv",) and not spec.files.validation
    test = datasets.read_labelled(spec, "test", project / "data/raw")
    assert test["label"].value_counts().sort_index().tolist() == [9, 138, 94, 65, 81, 113], "the README's test counts"
    again = minibert(project, "data", "add", str(TREC / "train.csv"), "--text", "question", "--label", "category", check=False)
    assert again.returncode == 2 and "dataset 'trec' is already added" in again.stderr
    checked = minibert(project, "data", "check", "trec")
    assert "validation" in checked.stdout and "(carved from train)" in checked.stdout
    strict = minibert(project, "data", "check", "trec", "--strict", check=False)
    assert strict.returncode == 2 and "10 in test in the train files" in strict.stderr and "--strict refuses them" in strict.stderr


def export(tmp_path: Path, rows: list[tuple[str, str]], name: str = "train.csv") -> Path:
    folder = tmp_path / "export"
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=["body", "queue"]).to_csv(folder / name, index=False)
    return folder / name


TICKETS = [(f"ticket {i} about {topic} please help", topic) for i in range(120) for topic in ("billing", "login", "bug")]

BAD = {
    "missing column": (lambda t: [export(t, TICKETS)], ["--text", "text", "--label", "queue"],
                       r"train\.csv: no column 'text' \(columns: body, queue\)"),
    "empty text": (lambda t: [export(t, TICKETS[:5] + [(" ", "bug")])], ["--text", "body", "--label", "queue"],
                   r"train\.csv, line 7, column 'body': the text is empty"),
    "empty label": (lambda t: [export(t, TICKETS[:5] + [("a ticket", "")])], ["--text", "body", "--label", "queue"],
                    r"train\.csv, line 7, column 'queue': the label is empty"),
    "labels not the files'": (lambda t: [export(t, TICKETS)], ["--text", "body", "--label", "queue", "--labels", "billing,bug"],
                              r"--labels billing,bug differs from the labels in the files \(billing, bug, login\)"),
    "a class too small to carve": (lambda t: [export(t, TICKETS + [("a lone refund question", "refund")])],
                                   ["--text", "body", "--label", "queue"], r"class 'refund' has no row in it"),
    "duplicates, strict": (lambda t: [export(t, TICKETS + TICKETS[:3])], ["--text", "body", "--label", "queue", "--strict"],
                           r"3 duplicates in the train files; --strict refuses them"),
    "no split in the name": (lambda t: [export(t, TICKETS, "tickets.csv")], ["--text", "body", "--label", "queue"],
                             r"tickets\.csv: cannot tell its split from its name"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_export_is_refused_in_one_line_and_nothing_is_written(project: Path, tmp_path: Path, case: str) -> None:
    make, options, message = BAD[case]
    out = minibert(project, "data", "add", *map(str, make(tmp_path)), "--name", "tickets", *options, check=False)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert out.returncode == 2 and len(errors) == 1, out.stderr[-2000:]
    assert re.search(message, errors[0]), errors
    assert "Traceback" not in out.stderr and written(project) == [], written(project)


def test_a_clean_export_without_test_files_gets_every_split_and_named_integer_labels(project: Path, tmp_path: Path) -> None:
    rows = [(f"review {i} was {'great' if i % 2 else 'awful'}", str(i % 2)) for i in range(400)]
    out = minibert(project, "data", "add", str(export(tmp_path, rows)), "--name", "reviews", "--text", "body", "--label",
                   "queue", "--labels", "negative,positive")
    assert "test" in out.stdout and out.stdout.count("(carved from train)") == 2
    spec = datasets.load("reviews", project / "datasets")
    assert spec.labels == {"0": "negative", "1": "positive"} and spec.class_names == ("negative", "positive")
    assert (project / "data/raw/reviews.dvc").is_file() and "/reviews" in (project / "data/raw/.gitignore").read_text()


def test_a_drop_is_appended_beside_the_files_listed_and_versioned_and_a_bad_one_leaves_nothing(
        project: Path, tmp_path: Path) -> None:
    minibert(project, "data", "add", str(export(tmp_path, TICKETS)), "--name", "tickets", "--text", "body", "--label", "queue")
    description = project / "datasets" / "tickets.yaml"
    description.write_text(description.read_text().replace("text: body", "text: body  # the ticket's text"))
    digest = yaml.safe_load((project / "data/raw/tickets.dvc").read_text())["outs"][0]["md5"]
    drop = [(f"a later ticket {i} about {topic}", topic) for i in range(30) for topic in ("billing", "login", "bug")]

    def state() -> tuple[str, str, list[str]]:
        return description.read_text(), (project / "data/raw/tickets.dvc").read_text(), written(project)

    before = state()
    refusals = {
        "test-2026.csv": (drop, "a test file; the test split of record stays fixed"),
        "train.csv": (drop, "exists: a drop needs a new file name"),
        "train-late.csv": (drop[:5] + [("a refund, please", "refund")], "line 7, column 'queue': label 'refund' is not one of"),
        "train-dupes.csv": (TICKETS[:4], "4 duplicates in the train files; --strict refuses them"),
    }
    for name, (rows, message) in refusals.items():
        out = minibert(project, "data", "append", "tickets", str(export(tmp_path / name, rows, name)), "--strict", check=False)
        errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
        assert out.returncode == 2 and len(errors) == 1 and message in errors[0], (name, out.stderr[-2000:])
        assert state() == before, f"{name}: nothing written"

    out = minibert(project, "data", "append", "tickets", str(export(tmp_path / "ok", drop, "train-2026-12.csv")))
    assert "appended 90 rows: billing 30, bug 30, login 30" in out.stdout
    assert (project / "data/raw/tickets/train-2026-12.csv").read_bytes() == (tmp_path / "ok/export/train-2026-12.csv").read_bytes()
    spec = datasets.load("tickets", project / "datasets")
    assert spec.files.train == ("tickets/train.csv", "tickets/train-2026-12.csv")
    assert "text: body  # the ticket's text" in description.read_text(), "the description's comments are kept"
    record = yaml.safe_load((project / "data/raw/tickets.dvc").read_text())["outs"][0]
    assert record["md5"] != digest and record["nfiles"] == 2, "DVC records the new digest"


def test_a_dataset_loaded_with_datasets_is_added_from_its_splits_with_its_source_recorded(project: Path, tmp_path: Path) -> None:
    """`data add --hub` takes anything `datasets.load_dataset` reads: a Hub id at a pinned revision, or (here, offline)
    a local folder of split files; each split becomes <split>.parquet under data/raw/<name>/, added as files are."""
    folder = tmp_path / "support-tickets"
    folder.mkdir()
    pd.DataFrame(TICKETS, columns=["body", "queue"]).to_csv(folder / "train.csv", index=False)
    test_rows = [(f"another ticket {i} about {topic}", topic) for i in range(10) for topic in ("billing", "login", "bug")]
    pd.DataFrame(test_rows, columns=["body", "queue"]).to_csv(folder / "test.csv", index=False)
    out = minibert(project, "data", "add", "--hub", str(folder), "--text", "body", "--label", "queue")
    assert "support-tickets: 3 classes (billing, bug, login)" in out.stdout
    spec = datasets.load("support-tickets", project / "datasets")
    assert spec.files.train == ("support-tickets/train.parquet",) and spec.files.test == ("support-tickets/test.parquet",)
    assert spec.hub == datasets.Hub(str(folder.resolve()), None)
    test = datasets.read_labelled(spec, "test", project / "data/raw")
    assert test["text"].tolist() == [t for t, _ in test_rows] and len(test) == 30
    assert (project / "data/raw/support-tickets.dvc").is_file()
    pinned = minibert(project, "data", "add", "--hub", "someone/tickets", "--text", "body", "--label", "queue", check=False)
    assert pinned.returncode == 2 and "pin the revision (--revision" in pinned.stderr
    both = minibert(project, "data", "add", str(folder / "train.csv"), "--hub", str(folder), "--text", "body", "--label",
                    "queue", "--name", "x", check=False)
    assert both.returncode == 2 and "give files or --hub, not both" in both.stderr
