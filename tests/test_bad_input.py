"""Bad input through the real stage commands: each case stops with exit code 2 and one line that
names the file, line or key and the fix, prints no traceback, leaves no output (nor temp file)
behind, and marks the stage's MLflow run FAILED when it had opened one. Also what is not an
error (duplicates, a 100,000-character text) and that two runs with the same params on CPU write
byte-identical models.

The project (``stage_project`` in conftest): a few hundred real SST-2 / IMDb rows, the tiny
profile, prepare, tokenizer and pretrain run once."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import SHARED, jsonl_gz, last_run_status, read_jsonl_gz, run_stage

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (SHARED / "sst2").is_dir(), reason=f"{SHARED} not present")]


@pytest.fixture(scope="module")
def project(stage_project: Path) -> Path:
    return stage_project


def assert_refused(out: subprocess.CompletedProcess, message: str, folder: Path) -> None:
    """Exit 2, one ``error:`` line matching ``message``, no traceback, ``folder`` left empty."""
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.search(message, errors[0]), out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert not folder.exists() or list(folder.iterdir()) == [], f"left behind: {list(folder.iterdir())}"


def sst2_rows(project: Path) -> list[str]:
    return (project / "data" / "raw" / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)


def with_sst2_train(project: Path, tmp_path: Path, body: bytes) -> Path:
    """A raw folder like the project's, its SST-2 train.tsv replaced by ``body``."""
    raw = tmp_path / "raw"
    shutil.copytree(project / "data" / "raw", raw)
    (raw / "sst2" / "train.tsv").write_bytes(body)
    return raw


def prepare_into(project: Path, raw: Path, out: Path) -> subprocess.CompletedProcess:
    return run_stage(project, "prepare", "--raw", raw, "--out", out / "prepared", "--metrics", out / "prepare.json",
                     "--report", out / "data.json")


def header_and(rows: list[str]) -> bytes:
    return ("sentence\tlabel\n" + "".join(rows)).encode("utf-8")


SST2_CASES = {
    "empty file": (lambda rows: b"", r"train\.tsv is empty; expected a header line naming the columns \(sentence, label\)"),
    "renamed column": (lambda rows: ("text\tlabel\n" + "".join(rows[1:])).encode(),
                       r"train\.tsv: no column 'sentence' \(columns: text, label\); name the right column"),
    "missing column": (lambda rows: ("sentence\n" + "".join(r.split("\t")[0] + "\n" for r in rows[1:])).encode(),
                       r"train\.tsv: no column 'label' \(columns: sentence\)"),
    "label outside 0/1": (lambda rows: header_and(rows[1:4] + ["a fine film \t2\n"]),
                          r"train\.tsv, line 5, column 'label': label '2' is not one of \['0', '1'\]; fix the row or add "
                          r"the class to labels in datasets/sst2\.yaml"),
    "non-UTF-8 bytes": (lambda rows: header_and(rows[1:3]) + "café au lait \t1\n".encode("latin-1"),
                        r"train\.tsv, line 4: byte 0xe9 at column 4 is not UTF-8; re-encode the file as UTF-8"),
    "whitespace-only text": (lambda rows: header_and(rows[1:3] + ["   \t1\n"]),
                             r"train\.tsv, line 4, column 'sentence': the text is empty; fill it in or delete the row"),
    "header only": (lambda rows: header_and([]), r"train\.tsv has a header but no rows"),
}


@pytest.mark.parametrize("case", list(SST2_CASES))
def test_a_bad_sst2_file_is_refused_naming_file_and_line(project: Path, tmp_path: Path, case: str) -> None:
    make, message = SST2_CASES[case]
    raw = with_sst2_train(project, tmp_path, make(sst2_rows(project)))
    out = prepare_into(project, raw, tmp_path / "out")
    assert_refused(out, message, tmp_path / "out")
    assert last_run_status(project, "prepare") == "FAILED"


IMDB_CASES = {
    "empty file": (lambda rows: [], r"train\.jsonl\.gz has no rows; expected one JSON object a line with the keys text, label"),
    "renamed key": (lambda rows: rows[:2] + [{"review": rows[2]["text"], "label": rows[2]["label"]}],
                    r"train\.jsonl\.gz, line 3: no key 'text' \(keys: review, label\)"),
    "label outside 0/1": (lambda rows: rows[:1] + [{"text": "fine", "label": 7}],
                          r"train\.jsonl\.gz, line 2, column 'label': label '7' is not one of \['0', '1'\]"),
    "whitespace-only text": (lambda rows: rows[:1] + [{"text": " \n ", "label": 1}], r"line 2, column 'text': the text is empty"),
    "lone surrogate": (lambda rows: rows[:1] + [{"text": "bad \ud800 film", "label": 1}],
                       r"line 2, column 'text': a lone UTF-16 surrogate '\\ud800' at character 5, which is no character"),
}


@pytest.mark.parametrize("case", [*IMDB_CASES, "not gzip"])
def test_a_bad_imdb_file_is_refused_naming_file_and_line(project: Path, tmp_path: Path, case: str) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(project / "data" / "raw", raw)
    target = raw / "imdb" / "train.jsonl.gz"
    if case == "not gzip":
        target.write_text('{"text": "plain text", "label": 1}\n')
        message = r"train\.jsonl\.gz: not a complete gzip file .*; pull it again"
    else:
        make, message = IMDB_CASES[case]
        jsonl_gz(target, make(read_jsonl_gz(target, 1)))
    out = prepare_into(project, raw, tmp_path / "out")
    assert_refused(out, message, tmp_path / "out")


def test_duplicates_are_dropped_and_counted_and_a_100k_character_text_is_kept(project: Path, tmp_path: Path) -> None:
    """Not errors: duplicate rows are cleaning (counted in the report), a very long text is data."""
    rows = sst2_rows(project)
    long_text = " ".join(["remarkable"] * 9100)[:100_000]
    raw = with_sst2_train(project, tmp_path, header_and(rows[1:] + rows[1:6] + [f"{long_text}\t1\n"]))
    out = prepare_into(project, raw, tmp_path / "out")
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "data.json").read_text())
    baseline = json.loads((project / "reports" / "data.json").read_text())
    assert report["dropped"]["sst2_train"]["duplicates"] == baseline["dropped"]["sst2_train"]["duplicates"] + 5
    import pandas as pd

    prepared = pd.concat([pd.read_parquet(tmp_path / "out" / "prepared" / f"{s}.parquet") for s in ("train", "val")])
    assert (prepared["text"].str.len() >= 90_000).sum() <= 1  # kept once (unless the row sample left it out)


def with_params(project: Path, section: str, key: str, value) -> str:
    params = project / "params.yaml"
    original = params.read_text()
    data = yaml.safe_load(original)
    data[section][key] = value
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    return original


def finetune(project: Path, out: Path, pretrained: Path | None = None, tokenizer: Path | None = None):
    return run_stage(project, "finetune", "--data", project / "data/prepared",
                     "--tokenizer", tokenizer or project / "models/tokenizer.json",
                     "--pretrained", pretrained or project / "models/pretrain.safetensors",
                     "--out", out / "model.safetensors", "--metrics", out / "finetune.json")


@pytest.mark.parametrize("section, key, value, message", [
    ("finetune", "epochz", 3, r"params\.yaml: unknown key 'finetune\.epochz'; did you mean 'finetune\.epochs'"),
    ("finetune", "epochs", "three", r"params\.yaml: finetune\.epochs: expected a number, got str 'three'"),
    ("finetune", "epochs", -1, r"params\.yaml: finetune\.epochs: -1(\.0)? is out of range; expected > 0"),
    ("finetune", "dropout", 1.5, r"params\.yaml: finetune\.dropout: 1\.5 is out of range; expected in \[0, 1\)"),
    ("pretrain", "mlm_probability", 0, r"params\.yaml: pretrain\.mlm_probability: 0(\.0)? is out of range; expected in \(0, 1\)"),
])
def test_bad_params_are_refused_naming_the_key(project: Path, tmp_path: Path, section, key, value, message) -> None:
    original = with_params(project, section, key, value)
    try:
        out = finetune(project, tmp_path / "out")
    finally:
        (project / "params.yaml").write_text(original)
    assert_refused(out, message, tmp_path / "out")


def test_a_truncated_checkpoint_is_refused_and_the_run_marked_failed(project: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "pretrain.safetensors"
    whole = (project / "models" / "pretrain.safetensors").read_bytes()
    for cut in (100, len(whole) // 2):  # inside the header, inside the weights
        damaged.write_bytes(whole[:cut])
        out = finetune(project, tmp_path / "out", pretrained=damaged)
        assert_refused(out, r"pretrain\.safetensors.* unreadable|not a readable safetensors checkpoint .*truncated or damaged",
                       tmp_path / "out")
        assert last_run_status(project, "finetune") == "FAILED"


def test_a_truncated_resume_checkpoint_is_refused(project: Path, tmp_path: Path) -> None:
    resume = tmp_path / "resume.pt"
    resume.write_bytes((project / "models" / "pretrain.safetensors").read_bytes()[:3000])
    out = run_stage(project, "pretrain", "--corpus", project / "data/prepared/corpus.parquet",
                    "--tokenizer", project / "models/tokenizer.json", "--out", tmp_path / "out/model.safetensors",
                    "--metrics", tmp_path / "out/pretrain.json", "--resume", resume)
    assert_refused(out, r"resume\.pt: the resume checkpoint is unreadable .*; delete it to train this stage from step 0",
                   tmp_path / "out")
    assert last_run_status(project, "pretrain") == "FAILED"


def test_a_damaged_prepared_table_is_refused_naming_it(project: Path, tmp_path: Path) -> None:
    data = tmp_path / "prepared"
    shutil.copytree(project / "data" / "prepared", data)
    corpus = data / "corpus.parquet"
    corpus.write_bytes(corpus.read_bytes()[: corpus.stat().st_size // 2])
    out = run_stage(project, "tokenizer", "--data", data, "--out", tmp_path / "out" / "tokenizer.json",
                    "--metrics", tmp_path / "out" / "tokenizer.json.metrics")
    assert_refused(out, r"corpus\.parquet: not a readable parquet table .*; delete it and rerun", tmp_path / "out")
    assert last_run_status(project, "tokenizer") == "FAILED"


def test_a_tokenizer_that_does_not_match_the_model_is_refused(project: Path, tmp_path: Path) -> None:
    """Same size, other vocabulary: only the digest the checkpoint records tells them apart."""
    table = json.loads((project / "models" / "tokenizer.json").read_text())
    vocab = table["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    special, rest = tokens[:5], tokens[5:]
    table["model"]["vocab"] = {t: i for i, t in enumerate(special + rest[::-1])}  # same tokens, other ids
    other = tmp_path / "tokenizer.json"
    other.write_text(json.dumps(table))
    out = finetune(project, tmp_path / "out", tokenizer=other)
    assert_refused(out, r"tokenizer\.json is not the tokenizer .*pretrain\.safetensors was trained with", tmp_path / "out")
    assert last_run_status(project, "finetune") == "FAILED"


def test_the_same_params_twice_on_cpu_write_identical_models(project: Path, tmp_path: Path) -> None:
    """Deterministic settings (no time budget, fixed seeds, the same thread count): fine-tuning
    twice gives byte-identical weights and equal metrics."""
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        done = finetune(project, out)
        assert done.returncode == 0, done.stderr[-3000:]
    assert (outs[0] / "model.safetensors").read_bytes() == (outs[1] / "model.safetensors").read_bytes()
    metrics = [json.loads((out / "finetune.json").read_text()) for out in outs]
    timing = {k for k in metrics[0] if "second" in k or k.endswith("_per_s")}
    assert {k: v for k, v in metrics[0].items() if k not in timing} == {k: v for k, v in metrics[1].items() if k not in timing}
