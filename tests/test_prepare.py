"""prepare: validation with errors that name file and line, normalisation, dedup, leakage, split."""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from minibert.validation import ConfigError
from pipeline.io import DataError
from pipeline.params import PrepareParams
from pipeline.stages.prepare import (
    clean,
    normalise,
    read_imdb,
    read_sst2,
    run,
    stratified_split,
)


def write_sst2(path: Path, rows: list[tuple[str, str]], header: str = "sentence\tlabel") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n" + "".join(f"{s} \t{label}\n" for s, label in rows))
    return path


def write_imdb(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def raw_layout(tmp_path: Path) -> tuple[Path, Path]:
    sentences = [(f"a {'good' if i % 2 else 'bad'} film number {i}", str(i % 2)) for i in range(40)]
    write_sst2(tmp_path / "sst2" / "train.tsv", sentences + [("a bad film number 0", "0"), ("in dev too", "1"),
                                                             ("conflict", "0"), ("conflict", "1"), ("x", "1")])
    write_sst2(tmp_path / "sst2" / "dev.tsv", [("in dev too", "1"), ("dev only , fine", "0")])
    reviews = {split: [{"id": f"{split}/{i}", "label": i % 2, "rating": 1, "text": f"{prefix} {i}.<br /><br />Ok."}
                       for i in range(6)] for split, prefix in (("train", "Review"), ("test", "Test review"))}
    reviews["train"].append({"id": "train/6", "label": 1, "rating": 9, "text": "Test review 1. <br/>Ok."})  # also in test
    for split, rows in reviews.items():
        write_imdb(tmp_path / "imdb" / f"{split}.jsonl.gz", rows)
    write_imdb(tmp_path / "imdb" / "unsup.jsonl.gz",
               [{"id": f"unsup/{i}", "label": -1, "rating": 0, "text": f"Unlabelled   review {i}<br/>end"} for i in range(5)]
               + [{"id": "unsup/5", "label": -1, "rating": 0, "text": "Test review 2. Ok."}]  # an IMDb test review
               + [{"id": f"unsup/t{i}", "label": -1, "rating": 0, "text": f"Review {i}. Ok."} for i in range(6)])  # train
    return tmp_path / "sst2", tmp_path / "imdb"


def test_normalise_replaces_br_tags_and_collapses_space() -> None:
    assert normalise("  Great<br /><br />film.\tReally <BR/>good ") == "Great film. Really good"


def test_read_sst2_errors_name_file_and_line(tmp_path: Path) -> None:
    path = write_sst2(tmp_path / "train.tsv", [("fine", "1"), ("broken", "2")])
    with pytest.raises(DataError, match=r"train\.tsv, line 3: label '2' is not 0 or 1"):
        read_sst2(path)
    path = write_sst2(tmp_path / "bad_header.tsv", [("fine", "1")], header="text\tlabel")
    with pytest.raises(DataError, match=r"bad_header\.tsv: header is \['text', 'label'\]"):
        read_sst2(path)
    path.write_text("sentence\tlabel\nno label here\n")
    with pytest.raises(DataError, match=r"line 2: expected 2 tab-separated fields, got 1"):
        read_sst2(path)
    with pytest.raises(FileNotFoundError, match="pull the raw data first"):
        read_sst2(tmp_path / "missing.tsv")


def test_read_imdb_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"text": "ok", "label": 1}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"train\.jsonl\.gz, line 2: not valid JSON"):
        read_imdb(path, (0, 1))
    write_imdb(path, [{"text": "ok", "label": 7}])
    with pytest.raises(DataError, match=r"line 1: need a string 'text' and a 'label' in \[0, 1\]"):
        read_imdb(path, (0, 1))


def test_clean_drops_short_duplicates_and_conflicts() -> None:
    df = pd.DataFrame({"text": ["good", "good ", "bad", "bad", "meh", "meh", "x"], "label": [1, 1, 0, 0, 1, 0, 1]})
    cleaned = clean(df, min_chars=2, labelled=True)
    assert sorted(cleaned.table["text"]) == ["bad", "good"]
    assert cleaned.dropped == {"short": 1, "conflicting_labels": 2, "duplicates": 2}


def test_stratified_split_keeps_label_balance() -> None:
    df = pd.DataFrame({"text": [str(i) for i in range(1000)], "label": [1] * 700 + [0] * 300})
    rest, held = stratified_split(df, 0.1, seed=3)
    assert len(held) == 100 and len(rest) == 900
    assert held["label"].sum() == 70
    assert not set(held["text"]) & set(rest["text"])
    again, _ = stratified_split(df, 0.1, seed=3)
    assert again.equals(rest)


def test_run_on_a_small_raw_layout(tmp_path: Path) -> None:
    sst2, imdb = raw_layout(tmp_path)
    tables, report = run(PrepareParams(val_fraction=0.25, seed=1), sst2, imdb)
    train_val = set(tables["sst2_train"]["text"]) | set(tables["sst2_val"]["text"])
    assert "in dev too" not in train_val, "dev sentences never leak into training"
    assert "conflict" not in train_val
    assert report["dropped"]["sst2_train"] == {"short": 1, "conflicting_labels": 2, "duplicates": 1, "in_dev": 1,
                                                 "inside_val": 0}
    assert len(tables["sst2_val"]) == 10 and len(tables["sst2_train"]) == 30
    assert tables["imdb_train"]["text"][0] == "Review 0. Ok."
    corpus = set(tables["corpus"]["text"])
    assert "Unlabelled review 0 end" in corpus and set(tables["sst2_train"]["text"]) <= corpus
    assert not set(tables["sst2_val"]["text"]) & corpus, "validation text stays out of pretraining"
    assert report["rows"]["sst2_dev"] == 2
    assert len(tables["imdb_val"]) == 2 and len(tables["imdb_train"]) == 4 and len(tables["imdb_test"]) == 6
    assert not set(tables["imdb_val"]["text"]) & set(tables["imdb_train"]["text"])
    assert "Test review 1. Ok." in set(tables["imdb_test"]["text"]), "a review in both IMDb splits stays in test"
    assert not set(tables["imdb_test"]["text"]) & (set(tables["imdb_train"]["text"]) | set(tables["imdb_val"]["text"]))
    assert report["dropped"]["imdb_train"]["in_test"] == 1
    # unlabelled copies of test and validation reviews stay out of pretraining; of training reviews, in
    assert not (set(tables["imdb_test"]["text"]) | set(tables["imdb_val"]["text"])) & corpus
    assert set(tables["imdb_train"]["text"]) <= corpus
    assert report["dropped"]["imdb_unsup"]["in_test_or_val"] == 1 + len(tables["imdb_val"])


def test_val_fraction_is_range_checked() -> None:
    with pytest.raises(ConfigError, match=r"prepare\.val_fraction: 1\.5 is out of range; expected in \(0, 1\)"):
        PrepareParams(val_fraction=1.5)
