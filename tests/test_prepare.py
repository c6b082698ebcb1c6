"""prepare and the dataset descriptions: every format read alike, errors that name file, line and column,
normalisation, dedup, leakage, and splits carved by a hash that appended rows never move."""

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from minibert.validation import ConfigError
from pipeline import datasets
from pipeline.datasets import carve, clean, hash_unit, normalise
from pipeline.io import DataError
from pipeline.params import PrepareParams
from pipeline.stages.prepare import run

ROOT = Path(__file__).resolve().parent.parent


def write_sst2(path: Path, rows: list[tuple[str, str]], header: str = "sentence\tlabel") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n" + "".join(f"{s} \t{label}\n" for s, label in rows))
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def raw_layout(tmp_path: Path) -> tuple[Path, Path]:
    """data/raw with small sst2/ and imdb/ folders, and the repository's descriptions of them."""
    raw = tmp_path / "raw"
    sentences = [(f"a {'good' if i % 2 else 'bad'} film number {i}", str(i % 2)) for i in range(40)]
    write_sst2(raw / "sst2" / "train.tsv", sentences + [("a bad film number 0", "0"), ("in dev too", "1"),
                                                         ("conflict", "0"), ("conflict", "1"), ("x", "1")])
    write_sst2(raw / "sst2" / "dev.tsv", [("in dev too", "1"), ("dev only , fine", "0")])
    reviews = {split: [{"id": f"{split}/{i}", "label": i % 2, "rating": 1, "text": f"{prefix} {i}.<br /><br />Ok."}
                       for i in range(40)] for split, prefix in (("train", "Review"), ("test", "Test review"))}
    reviews["train"].append({"id": "train/x", "label": 1, "rating": 9, "text": "Test review 1. <br/>Ok."})  # also in test
    for split, rows in reviews.items():
        write_jsonl(raw / "imdb" / f"{split}.jsonl.gz", rows)
    write_jsonl(raw / "imdb" / "unsup.jsonl.gz",
                [{"id": f"unsup/{i}", "label": -1, "text": f"Unlabelled   review {i}<br/>end"} for i in range(5)]
                + [{"id": "unsup/5", "label": -1, "text": "Test review 2. Ok."}]  # an IMDb test review
                + [{"id": f"unsup/t{i}", "label": -1, "text": f"Review {i}. Ok."} for i in range(6)])  # train reviews
    descriptions = tmp_path / "datasets"
    descriptions.mkdir()
    for name in ("sst2", "imdb"):
        (descriptions / f"{name}.yaml").write_text((ROOT / "datasets" / f"{name}.yaml").read_text())
    return raw, descriptions


def describe(root: Path, name: str, text: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / f"{name}.yaml").write_text(text)
    return root


def test_normalise_replaces_br_tags_and_collapses_space() -> None:
    assert normalise("  Great<br /><br />film.\tReally <BR/>good ") == "Great film. Really good"


def test_normalise_treats_every_whitespace_character_as_the_regex_rule_does() -> None:
    """The rule it replaced: ``<br>`` tags out, then ``re.sub(r"\\s+", " ")`` and strip. Over every code point
    (no-break spaces, line and paragraph separators, the C0 separators) both give the same text."""
    br, space = re.compile(r"<br\s*/?>", re.IGNORECASE), re.compile(r"\s+")
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"{c}a{c}{c}b<br{c}/>c{c}" for c in chars] + ["<BR>", "<br/ >x", "a <bR  /> b", "\u2028x\u3000\x1c"]
    assert [normalise(t) for t in texts] == [space.sub(" ", br.sub(" ", t)).strip() for t in texts]
    assert normalise("a\u00a0\u2029b") == "a b" and normalise("a\u200bb") == "a\u200bb", "zero-width space is no space"


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet", ".csv.gz", ".jsonl.gz"])
def test_every_format_reads_to_the_same_rows(tmp_path: Path, suffix: str) -> None:
    df = pd.DataFrame({"question": ["How far is the moon ?", "Who wrote \"Hamlet\" , then ?", "What is 2 , 3 ?"],
                       "category": ["NUM", "HUM", "NUM"], "id": [1, 2, 3]})
    path = tmp_path / "raw" / "q" / f"train{suffix}"
    path.parent.mkdir(parents=True)
    if suffix.startswith(".csv"):
        df.to_csv(path, index=False)
    elif suffix == ".tsv":
        path.write_text("question\tcategory\tid\n" + "".join(f"{q}\t{c}\t{i}\n" for q, c, i in df.itertuples(index=False)))
    elif suffix.startswith(".jsonl"):
        write_jsonl(path, df.to_dict("records")) if suffix.endswith(".gz") else path.write_text(
            "".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
    else:
        df.to_parquet(path)
    spec = datasets.load("q", describe(tmp_path / "datasets", "q", f"files: {{train: [q/train{suffix}]}}\n"
                                       "text: question\nlabel: category\nlabels: [HUM, NUM]\n"))
    got = datasets.read_labelled(spec, "train", tmp_path / "raw")
    assert got["text"].tolist() == df["question"].tolist() and got["label"].tolist() == [1, 0, 1]


def test_integer_labels_are_named_by_the_description_and_parquet_floats_read_as_integers(tmp_path: Path) -> None:
    path = tmp_path / "raw" / "r" / "train.parquet"
    path.parent.mkdir(parents=True)
    pd.DataFrame({"t": ["fine", "awful", "ok"], "y": [1.0, 0.0, 1.0]}).to_parquet(path)
    spec = datasets.load("r", describe(tmp_path / "datasets", "r", "files: {train: [r/train.parquet]}\n"
                                       "text: t\nlabel: y\nlabels: {0: negative, 1: positive}\n"))
    assert spec.class_names == ("negative", "positive")
    assert datasets.read_labelled(spec, "train", tmp_path / "raw")["label"].tolist() == [1, 0, 1]


@pytest.mark.parametrize(("body", "message"), [
    ("question,category\nHow far ?,NUM\nWho ?,PERSON\n",
     r"train\.csv, line 3, column 'category': label 'PERSON' is not one of \['HUM', 'NUM'\]; fix the row or add the "
     r"class to labels in datasets/q\.yaml"),
    ("question,category\n ,NUM\n", r"train\.csv, line 2, column 'question': the text is empty"),
    ("query,category\nHow far ?,NUM\n", r"train\.csv: no column 'question' \(columns: query, category\)"),
    ("", r"train\.csv is empty; expected a header line"),
    ("question,category\n", r"train\.csv has a header but no rows"),
    ('question,category\n"How far ?,NUM\n', r"train\.csv: not a readable csv file"),
])
def test_a_bad_file_is_refused_naming_file_line_and_column(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "raw" / "q").mkdir(parents=True)
    (tmp_path / "raw" / "q" / "train.csv").write_text(body)
    spec = datasets.load("q", describe(tmp_path / "datasets", "q", "files: {train: [q/train.csv]}\n"
                                       "text: question\nlabel: category\nlabels: [HUM, NUM]\n"))
    with pytest.raises(DataError, match=message):
        datasets.read_labelled(spec, "train", tmp_path / "raw")


@pytest.mark.parametrize(("text", "message"), [
    ("files: {train: [q/train.xlsx]}\ntext: a\nlabel: b\nlabels: [x, y]\n", r"files\.train: 'q/train\.xlsx' has no known format"),
    ("files: {train: [../q.csv]}\ntext: a\nlabel: b\nlabels: [x, y]\n", r"must be a path under data/raw/"),
    ("files: {train: [q/t.csv]}\ntext: a\nlabel: b\nlabels: [x]\n", r"labels: \['x'\] names fewer than two classes"),
    ("files: {train: [q/t.csv]}\ntext: a\nlabel: b\nlabels: [x, x]\n", r"names a class twice"),
    ("files: {train: [q/t.csv]}\ntext: a\nlabel: b\nlabels: [x, y]\ncolumn: c\n", r"unknown key 'column'"),
    ("files: {train: [q/t.csv]}\ntext: a\nlabel: b\nlabels: [x, y]\nintermediate: q\n", r"is the dataset itself"),
])
def test_a_bad_description_is_refused_naming_its_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    root = describe(tmp_path / "datasets", "q", text)
    with pytest.raises(ConfigError, match=rf"datasets/q\.yaml: .*{message}"):
        datasets.load("q", root)
    with pytest.raises(ConfigError, match=r"datasets/nope\.yaml: no such dataset description \(known: q\)"):
        datasets.load("nope", root)


def test_a_description_round_trips_through_dump() -> None:
    spec = datasets.load("sst2", ROOT / "datasets")
    assert spec.folders() == ["imdb", "sst2"] and spec.intermediate == "imdb" and spec.group == datasets.PHRASES
    assert datasets.Description(**{**datasets.from_dict(datasets.Description, __import__("yaml").safe_load(
        datasets.dump(spec))).__dict__, "name": "sst2"}) == spec


def test_clean_drops_short_duplicates_and_conflicts() -> None:
    df = pd.DataFrame({"text": ["good", "good ", "bad", "bad", "meh", "meh", "x"], "label": [1, 1, 0, 0, 1, 0, 1]})
    cleaned = clean(df, min_chars=2, labelled=True)
    assert sorted(cleaned.table["text"]) == ["bad", "good"]
    assert cleaned.dropped == {"short": 1, "conflicting_labels": 2, "duplicates": 2}


def test_a_carved_split_keeps_its_rows_when_rows_are_appended() -> None:
    df = pd.DataFrame({"text": [f"ticket {i}" for i in range(2000)], "label": [i % 3 for i in range(2000)]})
    rest, held, _ = carve(df, 0.1, "42:val", None)
    assert 150 < len(held) < 250 and not set(held["text"]) & set(rest["text"])
    assert held["label"].value_counts().min() > 40, "every class about its share"
    more = pd.concat([df, pd.DataFrame({"text": [f"new ticket {i}" for i in range(500)], "label": 0})], ignore_index=True)
    rest2, held2, _ = carve(more.sample(frac=1.0, random_state=0), 0.1, "42:val", None)  # appended and reordered
    assert set(held["text"]) <= set(held2["text"]) and set(rest["text"]) <= set(rest2["text"]), "no old row moved"
    assert not set(carve(df, 0.1, "43:val", None)[1]["text"]) == set(held["text"]), "another seed, another split"


def test_a_group_column_keeps_related_rows_on_one_side() -> None:
    df = pd.DataFrame({"text": [f"message {i}" for i in range(600)], "label": [i % 2 for i in range(600)],
                       "group": [f"thread {i // 6}" for i in range(600)]})
    rest, held, _ = carve(df, 0.2, "0:val", "group")
    assert 0 < len(held) < 300 and not set(held["group"]) & set(rest["group"])
    assert (held.groupby("group").size() == 6).all(), "whole threads"


def test_hash_unit_is_uniform_and_salted() -> None:
    keys = pd.Series([str(i) for i in range(20000)])
    u = hash_unit(keys, "s")
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert (hash_unit(keys, "s") == u).all() and not (hash_unit(keys, "t") == u).all()


def test_run_on_a_small_raw_layout(tmp_path: Path) -> None:
    raw, descriptions = raw_layout(tmp_path)
    tables, contract, report = run(PrepareParams(val_fraction=0.25, seed=1), "sst2", raw, descriptions)
    assert contract == {"labels": ["negative", "positive"], "intermediate": "imdb"}
    train_val = set(tables["train"]["text"]) | set(tables["val"]["text"])
    assert "in dev too" not in train_val, "test sentences never leak into training"
    assert "conflict" not in train_val
    dropped = report["dropped"]["sst2_train"]
    assert dropped["short"] == 1 and dropped["conflicting_labels"] == 2 and dropped["duplicates"] == 1 and dropped["in_test"] == 1
    assert len(tables["val"]) + len(tables["train"]) == 40 and 3 <= len(tables["val"]) <= 20
    assert report["rows"]["test"] == 2 and report["carved"] == ["validation"]
    assert report["classes_per_split"]["test"] == {"negative": 1, "positive": 1}
    corpus = set(tables["corpus"]["text"])
    assert "Unlabelled review 0 end" in corpus and set(tables["train"]["text"]) <= corpus
    assert not set(tables["val"]["text"]) & corpus, "validation text stays out of pretraining"
    inter = {s: set(tables[f"intermediate_{s}"]["text"]) for s in ("train", "val", "test")}
    assert "Test review 1. Ok." in inter["test"] and "Test review 1. Ok." not in inter["train"], "test keeps it"
    assert report["dropped"]["imdb_train"]["in_test"] == 1
    assert not inter["val"] & inter["train"] and len(inter["test"]) == 40
    assert not (inter["test"] | inter["val"]) & corpus, "unlabelled copies of scored reviews stay out"
    assert report["dropped"]["unlabelled"]["in_test_or_val"] == 1 + len({f"Review {i}. Ok." for i in range(6)} & inter["val"])


def test_a_dataset_without_test_files_gets_a_carved_test_split_and_no_intermediate(tmp_path: Path) -> None:
    (tmp_path / "raw" / "q").mkdir(parents=True)
    rows = [(f"question number {i} ?", ["HUM", "NUM", "LOC"][i % 3]) for i in range(300)]
    pd.DataFrame(rows, columns=["question", "category"]).to_csv(tmp_path / "raw" / "q" / "all.csv", index=False)
    describe(tmp_path / "datasets", "q", "files: {train: [q/all.csv]}\ntext: question\nlabel: category\n"
                                         "labels: [HUM, LOC, NUM]\n")
    tables, contract, report = run(PrepareParams(), "q", tmp_path / "raw", tmp_path / "datasets")
    assert contract == {"labels": ["HUM", "LOC", "NUM"], "intermediate": None}
    assert report["carved"] == ["test", "validation"] and "intermediate_train" not in tables
    assert sum(report["rows"][s] for s in ("train", "val", "test")) == 300 and 15 <= report["rows"]["test"] <= 50
    assert set(tables["corpus"]["text"]) == set(tables["train"]["text"]), "no unlabelled texts: the training texts"


def test_a_class_too_small_to_carve_a_split_from_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "raw" / "q").mkdir(parents=True)
    rows = [(f"question {i} ?", "HUM" if i < 200 else "ABBR") for i in range(202)]
    pd.DataFrame(rows, columns=["question", "category"]).to_csv(tmp_path / "raw" / "q" / "train.csv", index=False)
    pd.DataFrame([("test ?", "HUM")], columns=["question", "category"]).to_csv(tmp_path / "raw" / "q" / "test.csv", index=False)
    describe(tmp_path / "datasets", "q", "files: {train: [q/train.csv], test: [q/test.csv]}\ntext: question\n"
                                         "label: category\nlabels: [ABBR, HUM]\n")
    with pytest.raises(DataError, match=r"the validation split carved from q/train\.csv: class 'ABBR' has no row in it; "
                                        r"add rows of it, raise prepare\.val_fraction"):
        run(PrepareParams(), "q", tmp_path / "raw", tmp_path / "datasets")


def test_an_intermediate_task_with_other_classes_is_refused(tmp_path: Path) -> None:
    raw, descriptions = raw_layout(tmp_path)
    (descriptions / "imdb.yaml").write_text((descriptions / "imdb.yaml").read_text().replace(
        "{0: negative, 1: positive}", "{0: bad, 1: good}"))
    with pytest.raises(ConfigError, match=r"intermediate: imdb has the classes \['bad', 'good'\], the task "
                                          r"\['negative', 'positive'\]"):
        run(PrepareParams(), "sst2", raw, descriptions)


def test_fractions_are_range_checked() -> None:
    with pytest.raises(ConfigError, match=r"prepare\.val_fraction: 1\.5 is out of range; expected in \(0, 1\)"):
        PrepareParams(val_fraction=1.5)
    with pytest.raises(ConfigError, match=r"prepare\.val_fraction 0\.5 \+ test_fraction 0\.5 leave no training rows"):
        PrepareParams(val_fraction=0.5, test_fraction=0.5)
