"""prepare: validate and normalise the raw data, carve the validation split, write a report.

Inputs (raw layout of ../shared/data/README.md): sst2/{train,dev}.tsv, imdb/{train,test,unsup}.jsonl.gz.
Outputs (one folder, written atomically): sst2_{train,val,dev}, imdb_{train,val,test} and the
pretraining ``corpus`` (IMDb unlabeled + SST-2 train text) as parquet tables with columns
``text`` (and ``label``); a report with counts, drops and sha256 digests.

Rules: whitespace collapsed and IMDb ``<br />`` tags replaced by spaces; texts shorter than
``MIN_CHARS`` dropped; duplicate texts kept once (all copies dropped when their labels
disagree); SST-2 train rows whose text is also in GLUE dev dropped (no test leakage). The
validation splits are stratified, seeded samples: of SST-2's sentences, whole trees (the phrases
inside a held-out sentence leave training too; ``pipeline.phrase_trees``), and of IMDb train's
reviews. GLUE dev stays SST-2's test of record, the IMDb test split IMDb's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.io import DataError, atomic_path, text_lines, write_json
from pipeline.params import Params, PrepareParams, load_params
from pipeline.phrase_trees import inside_any, root_phrases
from pipeline.tracking import stage_run

BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
SPACE = re.compile(r"\s+")
MIN_CHARS = 2  # shorter texts (after normalisation) are dropped


def normalise(text: str) -> str:
    return SPACE.sub(" ", BR.sub(" ", text)).strip()


def require_text(path: Path, line_no: int, text: str) -> None:
    if not text.strip():
        raise DataError(f"{path}, line {line_no}: the text is empty; delete the line or fill in the text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # JSON's \ud800-style escapes can name half a character
        raise DataError(f"{path}, line {line_no}: the text holds a lone UTF-16 surrogate {text[err.start]!r} at character "
                        f"{err.start + 1}, which is no character; fix or delete that escape") from err


def read_sst2(path: Path) -> pd.DataFrame:
    """GLUE SST-2 train/dev TSV: header ``sentence\\tlabel``, labels 0/1."""
    rows, header = [], None
    for line_no, line in text_lines(path):
        fields = line.split("\t")
        if header is None:
            header = fields
            if header != ["sentence", "label"]:
                raise DataError(f"{path}: header is {header}, expected ['sentence', 'label'] (GLUE SST-2 format: "
                                "a tab-separated header line 'sentence<TAB>label', then one row per sentence)")
            continue
        if len(fields) != 2:
            raise DataError(f"{path}, line {line_no}: expected 2 tab-separated fields, got {len(fields)}")
        if fields[1] not in ("0", "1"):
            raise DataError(f"{path}, line {line_no}: label {fields[1]!r} is not 0 or 1")
        require_text(path, line_no, fields[0])
        rows.append((fields[0], int(fields[1])))
    if header is None:
        raise DataError(f"{path} is empty; expected the header 'sentence<TAB>label' and one row per sentence")
    if not rows:
        raise DataError(f"{path} has a header but no rows")
    return pd.DataFrame(rows, columns=["text", "label"])


def read_imdb(path: Path, labels: tuple[int, ...]) -> pd.DataFrame:
    """IMDb JSON Lines (gzipped): objects with ``text`` and ``label`` in ``labels``."""
    rows = []
    for line_no, line in text_lines(path, compressed=True):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}, line {line_no}: not valid JSON ({err})") from err
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or obj.get("label") not in labels:
            got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            raise DataError(f"{path}, line {line_no}: need a string 'text' and a 'label' in {list(labels)}; got {got}")
        require_text(path, line_no, obj["text"])
        rows.append((obj["text"], obj["label"]))
    if not rows:
        raise DataError(f"{path} has no rows; expected one JSON object per line with 'text' and 'label'")
    return pd.DataFrame(rows, columns=["text", "label"])


@dataclass
class Cleaned:
    table: pd.DataFrame
    dropped: dict[str, int]


def clean(df: pd.DataFrame, min_chars: int, labelled: bool) -> Cleaned:
    """Normalise text, drop short texts and duplicates (conflicting labels: drop every copy)."""
    df = df.assign(text=df["text"].map(normalise))
    short = df["text"].str.len() < min_chars
    df = df[~short]
    dropped = {"short": int(short.sum())}
    if labelled:
        n_labels = df.groupby("text")["label"].transform("nunique")
        conflicting = n_labels > 1
        dropped["conflicting_labels"] = int(conflicting.sum())
        df = df[~conflicting]
    before = len(df)
    df = df.drop_duplicates("text", keep="first")
    dropped["duplicates"] = before - len(df)
    return Cleaned(df.reset_index(drop=True), dropped)


def stratified_split(df: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rest, held-out) with ``fraction`` of each label held out; seeded."""
    rng = np.random.default_rng(seed)
    held = []
    for _, group in df.groupby("label", sort=True):
        n = int(round(len(group) * fraction))
        held.extend(rng.choice(group.index.to_numpy(), size=n, replace=False).tolist())
    mask = df.index.isin(held)
    return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True)


def split_by_sentences(df: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """SST-2 by whole trees: (train, val, dropped). ``fraction`` of the sentences of each label held
    out (``stratified_split`` of the root phrases), and every other phrase inside a held-out sentence
    dropped from train, counted in ``dropped``."""
    texts = df["text"].tolist()
    _, val = stratified_split(df[root_phrases(texts)], fraction, seed)
    inside = inside_any(texts, val["text"])  # the held-out sentences and their phrases
    return df[~inside].reset_index(drop=True), val, int(inside.sum()) - len(val)


def sample(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    if n is None or n >= len(df):
        return df
    return df.sample(n=n, random_state=seed).reset_index(drop=True)


def run(cfg: PrepareParams, sst2_dir: Path, imdb_dir: Path) -> tuple[dict[str, pd.DataFrame], dict]:
    """All prepared tables by name, and the report (without digests)."""
    report: dict = {"dropped": {}}
    dev = clean(read_sst2(sst2_dir / "dev.tsv"), MIN_CHARS, labelled=True)
    train = clean(read_sst2(sst2_dir / "train.tsv"), MIN_CHARS, labelled=True)
    leaked = train.table["text"].isin(set(dev.table["text"]))
    train.dropped["in_dev"] = int(leaked.sum())
    train_rest, val, train.dropped["inside_val"] = split_by_sentences(train.table[~leaked].reset_index(drop=True),
                                                                      cfg.val_fraction, cfg.seed)
    report["dropped"].update({"sst2_train": train.dropped, "sst2_dev": dev.dropped})
    tables = {
        "sst2_train": sample(train_rest, cfg.max_train_rows, cfg.seed),
        "sst2_val": sample(val, None if cfg.max_train_rows is None else max(cfg.max_train_rows // 5, 1), cfg.seed),
        "sst2_dev": sample(dev.table, cfg.max_dev_rows, cfg.seed),
    }
    test = clean(read_imdb(imdb_dir / "test.jsonl.gz", (0, 1)), MIN_CHARS, labelled=True)
    imdb = clean(read_imdb(imdb_dir / "train.jsonl.gz", (0, 1)), MIN_CHARS, labelled=True)
    test_texts = set(test.table["text"])
    leaked = imdb.table["text"].isin(test_texts)  # reviews in both splits: test keeps them
    imdb.dropped["in_test"] = int(leaked.sum())
    report["dropped"].update({"imdb_train": imdb.dropped, "imdb_test": test.dropped})
    imdb_rest, imdb_val = stratified_split(imdb.table[~leaked].reset_index(drop=True), cfg.val_fraction, cfg.seed)
    tables["imdb_train"] = sample(imdb_rest, cfg.max_train_rows, cfg.seed)
    tables["imdb_val"] = sample(imdb_val, None if cfg.max_train_rows is None else max(cfg.max_train_rows // 5, 1), cfg.seed)
    tables["imdb_test"] = sample(test.table, cfg.max_dev_rows, cfg.seed)
    unsup = clean(read_imdb(imdb_dir / "unsup.jsonl.gz", (-1,)), MIN_CHARS, labelled=False)
    evaluated = unsup.table["text"].isin(test_texts | set(imdb_val["text"]))  # scored texts stay out of pretraining
    unsup.dropped["in_test_or_val"] = int(evaluated.sum())
    report["dropped"]["imdb_unsup"] = unsup.dropped
    docs = sample(unsup.table[~evaluated].reset_index(drop=True), cfg.corpus_max_docs, cfg.seed)["text"]
    corpus = pd.concat([docs, tables["sst2_train"]["text"]], ignore_index=True)
    tables["corpus"] = pd.DataFrame({"text": corpus.drop_duplicates().reset_index(drop=True)})
    report["rows"] = {name: len(t) for name, t in tables.items()}
    report["labels"] = {name: {str(k): int(v) for k, v in t["label"].value_counts().sort_index().items()}
                        for name, t in tables.items() if "label" in t}
    report["corpus_chars"] = int(tables["corpus"]["text"].str.len().sum())
    return tables, report


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--out", type=Path, default=Path("data/prepared"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/prepare.json"))
    parser.add_argument("--report", type=Path, default=Path("reports/data.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()

    with stage_run("prepare", params, [args.raw / "sst2", args.raw / "imdb"]) as tracker:
        tables, report = run(params.prepare, args.raw / "sst2", args.raw / "imdb")
        with atomic_path(args.out) as tmp:
            tmp.mkdir()
            for name, table in tables.items():
                table.to_parquet(tmp / f"{name}.parquet", index=False)
        report["sha256"] = {name: sha256(args.out / f"{name}.parquet") for name in tables}
        write_json(report, args.report)
        write_json({"rows": report["rows"], "corpus_chars": report["corpus_chars"]}, args.metrics)
        tracker.log_metrics({f"rows_{k}": v for k, v in report["rows"].items()})
        for name in ("sst2_train", "sst2_val", "sst2_dev", "corpus"):
            tracker.log_dataset(tables[name], name, args.out / f"{name}.parquet", context=name)
        tracker.log_artifact(args.report)
        tracker.log_artifact(args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
