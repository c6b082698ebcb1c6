"""pipeline.hub against small local folders laid out like the two Hub repos (offline), and the
descriptions' Hub sources that ``data.source: hub`` fetches.

The rows are hand-written. Where the DVC mirror is present (../shared/data), the file formats are
also compared with it; otherwise with literals.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")
from datasets import ClassLabel, Dataset, Features, Value  # noqa: E402
from pipeline import hub  # noqa: E402
from pipeline.datasets import Hub  # noqa: E402

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"

SST2_FEATURES = Features(
    {"idx": Value("int32"), "sentence": Value("string"), "label": ClassLabel(names=["negative", "positive"])}
)
IMDB_FEATURES = Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])})

# GLUE style: lower-cased, tokenized, a space before the end of train/dev sentences.
SST2_ROWS = {
    "train": [
        ("a gentle , funny film about grief ", 1),
        ("flat , lifeless and far too long ", 0),
        ('the "twist" is a café conversation ', 1),
        ("never quite takes off ", 0),
    ],
    "validation": [("warm and unhurried ", 1), ("a chore to sit through ", 0), ("not bad at all ", 1)],
    "test": [("an odd little picture .", -1), ("it 's loud -- and hollow .", -1)],
}
IMDB_ROWS = {
    "train": [
        ("Loved it.<br /><br />The second act drags, but the ending pays off.", 1),
        ('A "thriller" with\tno thrills.\nSkip it \\ seriously.', 0),
        ("Naïve, but charming \u2014 and the score (by 作曲家) is lovely.\x10", 1),
    ],
    "test": [("Dull.<br />Very dull.", 0), ("One of the year's best.", 1)],
    "unsupervised": [("Saw it twice.", -1), ("<br />\n\t", -1), ("No opinion yet", -1), ("Mixed feelings.", -1)],
}
IMDB_README = """---
configs:
- config_name: plain_text
  data_files:
  - split: train
    path: plain_text/train-*
  - split: test
    path: plain_text/test-*
  - split: unsupervised
    path: plain_text/unsupervised-*
  default: true
---
"""


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network: the variables, and the values datasets / huggingface_hub read from them at import."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def make_sst2(root: Path, rows: dict[str, list[tuple[str, int]]] = SST2_ROWS, drop: str | None = None) -> Path:
    """stanfordnlp/sst2's layout: data/{split}-00000-of-00001.parquet, columns idx, sentence, label.

    ``drop`` removes a column from every split (one split alone cannot differ: see below).
    """
    (root / "data").mkdir(parents=True)
    for split, split_rows in rows.items():
        table = {
            "idx": list(range(len(split_rows))),
            "sentence": [s for s, _ in split_rows],
            "label": [label for _, label in split_rows],
        }
        features = SST2_FEATURES
        if drop is not None:
            del table[drop]
            features = Features({k: v for k, v in SST2_FEATURES.items() if k != drop})
        Dataset.from_dict(table, features=features).to_parquet(root / "data" / f"{split}-00000-of-00001.parquet")
    return root


def make_imdb(root: Path, rows: dict[str, list[tuple[str, int]]] = IMDB_ROWS, readme: bool = True) -> Path:
    """stanfordnlp/imdb's layout: README.md configs + plain_text/{split}-00000-of-00001.parquet."""
    (root / "plain_text").mkdir(parents=True)
    for split, split_rows in rows.items():
        table = {"text": [t for t, _ in split_rows], "label": [label for _, label in split_rows]}
        Dataset.from_dict(table, features=IMDB_FEATURES).to_parquet(
            root / "plain_text" / f"{split}-00000-of-00001.parquet"
        )
    if readme:
        (root / "README.md").write_text(IMDB_README, encoding="utf-8")
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def mirror_first_line(name: str, default: str) -> str:
    path = MIRROR / "sst2" / name
    if not path.exists():
        return default
    with open(path, encoding="utf-8", newline="") as f:
        return f.readline()


def read_jsonl_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        return f.read().split("\n")


# --- formats -------------------------------------------------------------------------------------


def test_sst2_files_match_the_mirror_format(tmp_path: Path) -> None:
    src = make_sst2(tmp_path / "hub_sst2")
    out = tmp_path / "raw" / "sst2"
    counts = hub.fetch(out, str(src), "glue_tsv", cache_dir=tmp_path / "cache")

    assert counts == {"train.tsv": 4, "dev.tsv": 3, "test.tsv": 2}
    assert sorted(p.name for p in out.iterdir()) == ["dev.tsv", "test.tsv", "train.tsv"]
    labelled_header = mirror_first_line("train.tsv", "sentence\tlabel\n")
    assert labelled_header == "sentence\tlabel\n"
    assert mirror_first_line("dev.tsv", labelled_header) == labelled_header
    assert mirror_first_line("test.tsv", "index\tsentence\n") == "index\tsentence\n"

    for name, split in (("train.tsv", "train"), ("dev.tsv", "validation")):
        expected = labelled_header + "".join(f"{s}\t{label}\n" for s, label in SST2_ROWS[split])
        assert (out / name).read_bytes() == expected.encode("utf-8"), name  # trailing space, quotes kept
    expected_test = "index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, (s, _) in enumerate(SST2_ROWS["test"]))
    assert (out / "test.tsv").read_bytes() == expected_test.encode("utf-8")


def test_sst2_lines_keep_the_space_before_the_tab(tmp_path: Path) -> None:
    out = tmp_path / "sst2"
    hub.fetch(out, str(make_sst2(tmp_path / "src")), "glue_tsv", cache_dir=tmp_path / "cache")
    first = (out / "train.tsv").read_text(encoding="utf-8").split("\n")[1]
    assert first == "a gentle , funny film about grief \t1"
    shape = r"[^\t\n]+ \t[01]\n?"  # text, GLUE's space, tab, label
    assert re.fullmatch(shape, first)
    glue = MIRROR / "sst2" / "train.tsv"
    if glue.exists():
        with open(glue, encoding="utf-8", newline="") as f:
            f.readline()
            assert re.fullmatch(shape, f.readline())


def test_imdb_files_match_the_mirror_format(tmp_path: Path) -> None:
    out = tmp_path / "raw" / "imdb"
    counts = hub.fetch(out, str(make_imdb(tmp_path / "hub_imdb")), "aclimdb_jsonl", cache_dir=tmp_path / "cache")

    assert counts == {"train.jsonl.gz": 3, "test.jsonl.gz": 2, "unsup.jsonl.gz": 4}
    assert sorted(p.name for p in out.iterdir()) == ["test.jsonl.gz", "train.jsonl.gz", "unsup.jsonl.gz"]
    mirror_gz = MIRROR / "imdb" / "train.jsonl.gz"
    if mirror_gz.exists():
        mirror_header = mirror_gz.read_bytes()[:10]
        with gzip.open(mirror_gz, "rt", encoding="utf-8") as f:
            mirror_keys = list(json.loads(f.readline()))
    else:
        mirror_header = bytes.fromhex("1f8b0800000000000203")  # deflate, mtime 0, max compression, Unix
        mirror_keys = ["id", "label", "rating", "text"]
    assert mirror_keys == ["id", "label", "rating", "text"]
    shape = r'\{"id": "[a-z]+/[^"]+", "label": (-1|0|1), "rating": \d+, "text": ".*"\}'  # json.dumps spacing
    if mirror_gz.exists():
        with gzip.open(mirror_gz, "rt", encoding="utf-8") as f:
            assert re.fullmatch(shape, f.readline().rstrip("\n"))
    first = read_jsonl_gz(out / "train.jsonl.gz")[0]
    assert re.fullmatch(shape, first)
    assert first.startswith('{"id": "train/0", "label": 1, "rating": 0, "text": "Loved it.<br /><br />')

    for name, split, prefix in (
        ("train.jsonl.gz", "train", "train"),
        ("test.jsonl.gz", "test", "test"),
        ("unsup.jsonl.gz", "unsupervised", "unsup"),
    ):
        assert (out / name).read_bytes()[:10] == mirror_header, name
        lines = read_jsonl_gz(out / name)
        assert lines[-1] == "" and len(lines) - 1 == counts[name]  # one physical line a review
        records = [json.loads(line) for line in lines[:-1]]
        assert [list(r) for r in records] == [mirror_keys] * len(records)
        assert [r["id"] for r in records] == [f"{prefix}/{i}" for i in range(len(records))]
        assert [(r["text"], r["label"]) for r in records] == IMDB_ROWS[split]
        assert all(r["rating"] == 0 for r in records)


def test_imdb_text_survives_the_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "imdb"
    hub.fetch(out, str(make_imdb(tmp_path / "src")), "aclimdb_jsonl", cache_dir=tmp_path / "cache")
    raw = read_jsonl_gz(out / "train.jsonl.gz")
    assert "<br /><br />" in raw[0]  # tags written as-is, not escaped
    assert "with\\tno thrills.\\nSkip it \\\\ seriously." in raw[1]  # tab, newline, backslash escaped
    assert "Naïve" in raw[2] and "作曲家" in raw[2] and "\\u0010" in raw[2]  # UTF-8 kept, control escaped
    texts = [json.loads(line)["text"] for line in raw[:-1]]
    assert texts == [t for t, _ in IMDB_ROWS["train"]]


@pytest.mark.skipif(not (MIRROR / "sst2" / "dev.tsv").exists(), reason="DVC mirror not present")
def test_line_writers_reproduce_the_mirror_byte_for_byte() -> None:
    """Parse mirror lines, write them back with hub's writers: the bytes must not change."""
    for name in ("dev.tsv", "test.tsv"):
        original = (MIRROR / "sst2" / name).read_bytes()
        lines = original.decode("utf-8").split("\n")
        assert lines[-1] == ""
        header, *rows = lines[:-1]
        if name == "test.tsv":
            fields = [row.split("\t", 1) for row in rows]
        else:
            fields = [row.rsplit("\t", 1) for row in rows]
        rebuilt = hub.tsv_line(*header.split("\t"), "header") + "".join(
            hub.tsv_line(a, b, f"{name} row {i}") for i, (a, b) in enumerate(fields)
        )
        assert rebuilt.encode("utf-8") == original, name
    with gzip.open(MIRROR / "imdb" / "train.jsonl.gz", "rt", encoding="utf-8", newline="") as f:
        for _, line in zip(range(3000), f):
            record = json.loads(line)
            assert hub.jsonl_line(record["id"], record["label"], record["rating"], record["text"]) == line


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("char", "name"), [("\t", "a tab"), ("\n", "a newline"), ("\r", "a carriage return")])
def test_sst2_sentence_the_tsv_cannot_hold_raises_naming_the_row(tmp_path: Path, char: str, name: str) -> None:
    rows = {**SST2_ROWS, "validation": [("fine ", 1), (f"broken{char}sentence ", 0)]}
    src = make_sst2(tmp_path / "src", rows)
    out = tmp_path / "raw" / "sst2"
    with pytest.raises(ValueError, match=rf"split 'validation', row 1: the text contains {name}"):
        hub.fetch(out, str(src), "glue_tsv", cache_dir=tmp_path / "cache")
    assert not out.exists()
    assert list((tmp_path / "raw").iterdir()) == []  # the temporary folder is gone too


@pytest.mark.parametrize("column", ["label", "sentence"])
def test_sst2_missing_column_raises_naming_it(tmp_path: Path, column: str) -> None:
    src = make_sst2(tmp_path / "src", drop=column)
    with pytest.raises(ValueError, match=rf"src, split 'train': column '{column}' is missing") as err:
        hub.fetch(tmp_path / "sst2", str(src), "glue_tsv", cache_dir=tmp_path / "cache")
    assert "stanfordnlp/sst2" in str(err.value)  # the fix names the expected dataset
    assert not (tmp_path / "sst2").exists()


def test_split_files_with_different_columns_raise_naming_the_dataset(tmp_path: Path) -> None:
    src = make_sst2(tmp_path / "src")
    Dataset.from_dict({"idx": [0], "sentence": ["no label here "]}).to_parquet(
        src / "data" / "train-00000-of-00001.parquet"
    )
    with pytest.raises(ValueError, match=r"src: its data files do not load as one table .*same columns"):
        hub.fetch(tmp_path / "sst2", str(src), "glue_tsv", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "sst2").exists()


def test_imdb_missing_column_raises_naming_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    for split in ("train", "test", "unsupervised"):
        Dataset.from_dict({"review": ["ok"], "label": [0 if split != "unsupervised" else -1]}).to_parquet(
            src / "data" / f"{split}-00000-of-00001.parquet"
        )
    with pytest.raises(ValueError, match=r"split 'train': column 'text' is missing \(found: review, label\)"):
        hub.fetch(tmp_path / "imdb", str(src), "aclimdb_jsonl", cache_dir=tmp_path / "cache")


def test_imdb_without_its_readme_loses_the_unsupervised_split(tmp_path: Path) -> None:
    """plain_text/unsupervised-* matches none of datasets' default split patterns: only the README maps it."""
    src = make_imdb(tmp_path / "src", readme=False)
    with pytest.raises(ValueError, match=r"split 'unsupervised' is missing \(found: test, train\)"):
        hub.fetch(tmp_path / "imdb", str(src), "aclimdb_jsonl", cache_dir=tmp_path / "cache")


def test_imdb_unexpected_label_raises_naming_the_row(tmp_path: Path) -> None:
    rows = {**IMDB_ROWS, "train": [("fine", 1), ("odd", -1)]}
    with pytest.raises(ValueError, match=r"split 'train', row 1: label -1 is not one of \[0, 1\]"):
        hub.fetch(tmp_path / "imdb", str(make_imdb(tmp_path / "src", rows)), "aclimdb_jsonl", cache_dir=tmp_path / "cache")


# --- atomic replacement --------------------------------------------------------------------------


def test_failed_fetch_keeps_the_prior_layout(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    hub.fetch(raw / "sst2", str(make_sst2(tmp_path / "good")), "glue_tsv", cache_dir=tmp_path / "cache")
    before = snapshot(raw / "sst2")
    # test.tsv is written last: train.tsv and dev.tsv are already complete when this row fails.
    bad = {**SST2_ROWS, "train": [("new text ", 1)], "test": [("ok .", -1), ("tab\there .", -1)]}
    with pytest.raises(ValueError, match=r"split 'test', row 1 \(idx 1\)"):
        hub.fetch(raw / "sst2", str(make_sst2(tmp_path / "bad", bad)), "glue_tsv", cache_dir=tmp_path / "cache")
    assert snapshot(raw / "sst2") == before
    assert [p.name for p in raw.iterdir()] == ["sst2"]  # no partial or old folder left beside it


def test_successful_fetch_replaces_the_whole_folder(tmp_path: Path) -> None:
    out = tmp_path / "raw" / "sst2"
    out.mkdir(parents=True)
    (out / "train.tsv").write_text("sentence\tlabel\nstale \t0\n", encoding="utf-8")
    (out / "stale.txt").write_text("from an older layout", encoding="utf-8")
    hub.fetch(out, str(make_sst2(tmp_path / "src")), "glue_tsv", cache_dir=tmp_path / "cache")
    assert sorted(p.name for p in out.iterdir()) == ["dev.tsv", "test.tsv", "train.tsv"]
    assert "stale" not in (out / "train.tsv").read_text(encoding="utf-8")
    assert [p.name for p in out.parent.iterdir()] == ["sst2"]


def test_fetch_sources_writes_every_folder_or_none(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    sources = {"sst2": Hub(str(make_sst2(tmp_path / "sst2_src")), layout="glue_tsv"),
               "imdb": Hub(str(make_imdb(tmp_path / "imdb_src")), layout="aclimdb_jsonl")}
    counts = hub.fetch_sources(raw, sources, cache_dir=tmp_path / "c")
    assert counts["sst2"]["dev.tsv"] == 3 and counts["imdb"]["unsup.jsonl.gz"] == 4
    before = {name: snapshot(raw / name) for name in ("sst2", "imdb")}

    new_sst2 = make_sst2(tmp_path / "sst2_new", {**SST2_ROWS, "train": [("only one row ", 1)]})
    bad_imdb = make_imdb(tmp_path / "imdb_bad", {**IMDB_ROWS, "unsupervised": [("x", -1), ("y", 1)]})
    with pytest.raises(ValueError, match=r"split 'unsupervised', row 1: label 1 is not one of \[-1\]"):
        hub.fetch_sources(raw, {"sst2": Hub(str(new_sst2), layout="glue_tsv"), "imdb": Hub(str(bad_imdb), layout="aclimdb_jsonl")},
                          cache_dir=tmp_path / "c")
    assert {name: snapshot(raw / name) for name in ("sst2", "imdb")} == before  # sst2 not replaced either
    assert sorted(p.name for p in raw.iterdir()) == ["imdb", "sst2"]


def test_parquet_layout_keeps_every_split_and_column(tmp_path: Path) -> None:
    counts = hub.fetch(tmp_path / "raw" / "mine", str(make_sst2(tmp_path / "src")), "parquet", cache_dir=tmp_path / "c")
    assert counts == {"train.parquet": 4, "validation.parquet": 3, "test.parquet": 2}
    import pandas as pd

    table = pd.read_parquet(tmp_path / "raw" / "mine" / "validation.parquet")
    assert list(table.columns) == ["idx", "sentence", "label"] and table["sentence"].tolist() == [s for s, _ in SST2_ROWS["validation"]]
    # an unlabelled split (IMDb's unsupervised) is not a labelled file: left out, as data add --hub leaves it
    assert hub.fetch(tmp_path / "raw" / "reviews", str(make_imdb(tmp_path / "imdb_src")), "parquet", cache_dir=tmp_path / "c") == {
        "train.parquet": 3, "test.parquet": 2}
    with pytest.raises(ValueError, match="layout 'csv' is not one of"):
        hub.fetch(tmp_path / "raw" / "other", str(tmp_path / "src"), "csv", cache_dir=tmp_path / "c")


def describe(root: Path, name: str, body: str) -> None:
    (root / "datasets").mkdir(parents=True, exist_ok=True)
    (root / "datasets" / f"{name}.yaml").write_text(body)


def test_the_folders_a_dataset_reads_come_from_the_descriptions_that_own_them(tmp_path: Path) -> None:
    from minibert.validation import ConfigError
    from pipeline.datasets import Hub, hub_sources

    describe(tmp_path, "reviews", "files: {train: [rev/train.jsonl.gz], test: [rev/test.jsonl.gz]}\ntext: text\nlabel: label\n"
             "labels: {0: neg, 1: pos}\nunlabelled: {files: [rev/unsup.jsonl.gz]}\nhub: {id: org/reviews, layout: aclimdb_jsonl}\n")
    describe(tmp_path, "phrases", "files: {train: [ph/train.tsv], test: [ph/dev.tsv]}\ntext: sentence\nlabel: label\n"
             "labels: {0: neg, 1: pos}\nintermediate: reviews\nhub: {id: org/phrases, revision: v1, layout: glue_tsv}\n")
    describe(tmp_path, "questions", "files: {train: [q/train.csv]}\ntext: question\nlabel: category\nlabels: [A, B]\n"
             "unlabelled: {files: [rev/unsup.jsonl.gz]}\n")
    root = tmp_path / "datasets"
    assert hub_sources("phrases", root) == {"ph": Hub("org/phrases", "v1", "glue_tsv"), "rev": Hub("org/reviews", None, "aclimdb_jsonl")}
    # its own folder has no Hub source (it is pulled); the reviews it pretrains on come from theirs
    assert hub_sources("questions", root) == {"rev": Hub("org/reviews", None, "aclimdb_jsonl")}
    describe(tmp_path, "copy", "files: {train: [rev/train.jsonl.gz]}\ntext: text\nlabel: label\nlabels: {0: neg, 1: pos}\n"
             "hub: {id: someone/else}\n")
    with pytest.raises(ConfigError, match=r"reviews.yaml: hub: data/raw/rev/ already comes from someone/else \(.*copy.yaml\)"):
        hub_sources("questions", root)


def test_data_source_hub_fetches_the_described_folders_and_versions_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from pipeline.orchestration import fetch_data, tool_env
    from pipeline.params import DataParams

    describe(tmp_path, "phrases", "files: {train: [ph/train.tsv], test: [ph/dev.tsv]}\ntext: sentence\nlabel: label\n"
             f"labels: {{0: neg, 1: pos}}\nhub: {{id: {make_sst2(tmp_path / 'src')}, layout: glue_tsv}}\n")
    monkeypatch.chdir(tmp_path)
    subprocess.run(["dvc", "init", "--no-scm", "--quiet"], check=True, env=tool_env())
    (tmp_path / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    fetch_data(DataParams(dataset="phrases", source="hub"))
    assert sorted(p.name for p in (tmp_path / "data" / "raw").iterdir()) == ["ph", "ph.dvc"]  # no git here: no .gitignore
    assert (tmp_path / "data" / "raw" / "ph" / "dev.tsv").read_text(encoding="utf-8").splitlines()[0] == "sentence\tlabel"
    assert "md5:" in (tmp_path / "data" / "raw" / "ph.dvc").read_text()


# --- the Hub itself, offline ---------------------------------------------------------------------


def test_unknown_hub_id_offline_fails_fast_and_clearly(tmp_path: Path) -> None:
    start = time.perf_counter()
    with pytest.raises(ConnectionError) as err:
        hub.fetch(tmp_path / "imdb", "no-such-org/no-such-imdb", "aclimdb_jsonl", cache_dir=tmp_path / "cache")
    elapsed = time.perf_counter() - start
    message = str(err.value)
    assert "'no-such-org/no-such-imdb'" in message
    assert "HF_HUB_OFFLINE" in message and "dvc pull" in message
    assert elapsed < 5.0, f"took {elapsed:.1f} s: offline mode should fail at once"
    assert not (tmp_path / "imdb").exists()
