"""Datasets as data: a description (``datasets/<name>.yaml``) says where a labelled dataset's files are
(under ``data/raw/``, DVC-tracked), which columns hold the text and the label, the class names, which
files are train / validation / test, how related rows group when a split is carved, and optionally
unlabelled texts and an intermediate task. ``read_labelled`` and ``read_unlabelled`` turn a description
into tables of ``text`` and ``label`` (the class's index in ``labels``), and ``prepare_splits`` cleans them,
takes test texts out of training and carves the missing splits (the ``prepare`` stage and ``minibert data``
both run it). Nothing else in the pipeline knows a dataset by its name.

Formats, by file suffix: .csv, .tsv (no quoting: a field is everything between tabs), .jsonl, .parquet,
each also gzipped (.gz). Every error is one line naming the file, row and column and the fix.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import yaml

from minibert.validation import ConfigError, from_dict
from pipeline.io import DataError, text_lines
from pipeline.params import PrepareParams
from pipeline.phrase_trees import inside_any, root_phrases

DESCRIPTIONS = Path("datasets")  # <name>.yaml, one a dataset
RAW = Path("data/raw")  # every file path of a description is relative to this folder
PHRASES = "phrases"  # group: a row whose text lies inside another row's text goes with it (a treebank's sub-phrases)
SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Files:
    """Paths under ``data/raw/``; a missing validation or test split is carved from train (``prepare``)."""

    train: tuple[str, ...]
    validation: tuple[str, ...] = ()
    test: tuple[str, ...] = ()  # the test split of record


@dataclass(frozen=True)
class Unlabelled:
    """Texts without labels: the tokenizer's and pretraining's corpus, and the distillation transfer set's source."""

    files: tuple[str, ...]
    text: str = "text"


@dataclass(frozen=True)
class Hub:
    """The Hub dataset the description's folder comes from (``minibert data add --hub`` writes it): under
    ``data.source: hub`` the folder is fetched from it (``pipeline.hub.fetch_sources``) instead of pulled."""

    id: str  # a Hub dataset id (or a local folder datasets.load_dataset reads)
    revision: str | None = None  # a commit sha or tag; None: data.hub_revision, else the default branch
    layout: Literal["parquet", "glue_tsv", "aclimdb_jsonl"] = "parquet"  # how its splits become files (pipeline.hub.LAYOUTS)


@dataclass(frozen=True)
class Description:
    files: Files
    text: str  # the column holding the text
    label: str  # the column holding the label
    # the classes in order: a list of the label values themselves (string labels), or {value: name}
    # (integer or coded labels); a row whose label is not listed is an error
    labels: dict[str, str] | list[str]
    group: str | None = None  # a column whose equal values stay on one side of a carved split, or "phrases"
    unlabelled: Unlabelled | None = None
    intermediate: str | None = None  # another description learnt from first (same class names)
    hub: Hub | None = None  # where its folder comes from under data.source: hub (the files are what is read)
    name: str = field(default="", compare=False)  # the file's stem, set by ``load``

    def __post_init__(self) -> None:
        if not self.files.train:
            raise ConfigError("files.train: list at least one training file")
        names = self.class_names
        if len(names) < 2:
            raise ConfigError(f"labels: {list(names)} names fewer than two classes; a classifier needs two or more")
        if len(set(names)) != len(names):
            raise ConfigError(f"labels: {list(names)} names a class twice; give each class one name")
        for split in SPLITS:
            for path in getattr(self.files, split):
                check_suffix(path, f"files.{split}")
        for path in self.unlabelled.files if self.unlabelled else ():
            check_suffix(path, "unlabelled.files")

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self.labels.values()) if isinstance(self.labels, dict) else tuple(self.labels)

    @property
    def codes(self) -> dict[str, int]:
        """A label value as written in the files -> its class index."""
        values = self.labels.keys() if isinstance(self.labels, dict) else self.labels
        return {value: i for i, value in enumerate(values)}

    def folders(self) -> list[str]:
        """The top folders under ``data/raw/`` its files lie in (what ``dvc pull`` restores)."""
        paths = [*self.files.train, *self.files.validation, *self.files.test, *(self.unlabelled.files if self.unlabelled else ())]
        return sorted({Path(p).parts[0] for p in paths})


def check_suffix(path: str, key: str) -> None:
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise ConfigError(f"{key}: {path!r} must be a path under data/raw/ (relative, no '..')")
    if file_format(path) is None:
        raise ConfigError(f"{key}: {path!r} has no known format; name it *.csv, *.tsv, *.jsonl or *.parquet (each may end in .gz)")


def file_format(path: str | Path) -> str | None:
    """"csv" | "tsv" | "jsonl" | "parquet" by the suffix (under a .gz), or None."""
    suffixes = Path(path).suffixes
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1][1:] if suffixes and suffixes[-1] in SUFFIXES else None


def description_path(name: str, root: Path = DESCRIPTIONS) -> Path:
    return root / f"{name}.yaml"


def load(name: str, root: Path = DESCRIPTIONS) -> Description:
    """``datasets/<name>.yaml``, validated; ConfigError naming the file and the key."""
    path = description_path(name, root)
    if not path.is_file():
        known = sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []
        raise ConfigError(f"{path}: no such dataset description (known: {', '.join(known) or 'none'}); add one with "
                          "`minibert data add FILE... --text COLUMN --label COLUMN --name NAME`")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        spec = from_dict(Description, raw)
    except (yaml.YAMLError, ConfigError) as err:
        raise ConfigError(f"{path}: {err}") from None
    if spec.intermediate == name:
        raise ConfigError(f"{path}: intermediate: {name!r} is the dataset itself; name another description or remove the key")
    return Description(**{**spec.__dict__, "name": name})


def needed_folders(name: str, root: Path = DESCRIPTIONS) -> list[str]:
    """The ``data/raw/`` folders the dataset ``name`` reads: its own, its unlabelled texts' and its intermediate task's."""
    spec = load(name, root)
    return sorted({*spec.folders(), *(load(spec.intermediate, root).folders() if spec.intermediate else ())})


def hub_sources(name: str, root: Path = DESCRIPTIONS) -> dict[str, Hub]:
    """Folder -> Hub source for the folders dataset ``name`` reads that a description with a ``hub`` key owns
    (its labelled files lie there: the IMDb description owns ``imdb/``, whose unlabelled reviews SST-2 reads too).
    A folder no such description owns is absent: it comes from the DVC remote. ConfigError if two disagree."""
    owners: dict[str, tuple[Hub, Path]] = {}
    for path in sorted(root.glob("*.yaml")):
        spec = load(path.stem, root)
        if spec.hub is None:
            continue
        labelled = [*spec.files.train, *spec.files.validation, *spec.files.test]
        for folder in sorted({Path(p).parts[0] for p in labelled}):
            hub, owner = owners.setdefault(folder, (spec.hub, path))
            if hub != spec.hub:
                raise ConfigError(f"{path}: hub: data/raw/{folder}/ already comes from {hub.id} ({owner}); "
                                  "give a folder one Hub source")
    return {folder: owners[folder][0] for folder in needed_folders(name, root) if folder in owners}


def dump(spec: Description) -> str:
    """The description as YAML (what ``load`` reads back), without empty keys."""
    files = {split: list(getattr(spec.files, split)) for split in SPLITS if getattr(spec.files, split)}
    out: dict = {"files": files, "text": spec.text, "label": spec.label,
                 "labels": dict(spec.labels) if isinstance(spec.labels, dict) else list(spec.labels)}
    if spec.group:
        out["group"] = spec.group
    if spec.unlabelled:
        out["unlabelled"] = {"files": list(spec.unlabelled.files), "text": spec.unlabelled.text}
    if spec.intermediate:
        out["intermediate"] = spec.intermediate
    if spec.hub:
        out["hub"] = {"id": spec.hub.id, "revision": spec.hub.revision}
        if spec.hub.layout != "parquet":
            out["hub"]["layout"] = spec.hub.layout
    return yaml.safe_dump(out, sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------------------------------------- reading


def where(path: Path, row: int) -> str:
    """How a message names a row: its line in a text file (the header is line 1), its position in a parquet table."""
    return f"{path}, {'row' if file_format(path) == 'parquet' else 'line'} {row}"


def read_columns(path: Path, columns: list[str]) -> pd.DataFrame:
    """``columns`` of a raw file as strings (None for an empty cell), with ``row``: the row's number as ``where``
    names it (for CSV, a quoted cell spanning lines shifts the lines after it)."""
    if not path.is_file():
        raise DataError(f"{path} not found; pull the raw data first (dvc pull, or make pipeline)")
    kind = file_format(path)
    if kind == "jsonl":
        return read_jsonl(path, columns)
    gzipped = path.suffix == ".gz"
    try:
        if kind == "parquet":
            df = pd.read_parquet(path)
        else:
            if not any(line.strip() for _, (_, line) in zip(range(1), text_lines(path, gzipped))):
                raise DataError(f"{path} is empty; expected a header line naming the columns ({', '.join(columns)}) "
                                "and one row a text")
            extra = {"sep": "\t", "quoting": csv.QUOTE_NONE} if kind == "tsv" else {}
            df = pd.read_csv(path, dtype=str, keep_default_na=False, compression="infer", encoding="utf-8", **extra)
    except UnicodeDecodeError:
        for _ in text_lines(path, gzipped):  # names the line and column of the first bad byte
            pass
        raise
    except (ValueError, OSError, pd.errors.ParserError, EOFError) as err:
        if isinstance(err, DataError):
            raise
        raise DataError(f"{path}: not a readable {kind} file ({str(err).splitlines()[0]}); fix or re-export it") from err
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: no column {missing[0]!r} (columns: {', '.join(map(str, df.columns))}); name the right "
                        "column (--text / --label, or the description's text / label) or fix the header")
    if df.empty:
        raise DataError(f"{path} has a header but no rows; add rows or leave the file out")
    out = pd.DataFrame({c: df[c].map(as_text) for c in columns})
    out["row"] = range(2, len(out) + 2) if kind != "parquet" else range(1, len(out) + 1)
    return out


def read_jsonl(path: Path, columns: list[str]) -> pd.DataFrame:
    rows, numbers = [], []
    if not path.is_file():
        raise DataError(f"{path} not found; pull the raw data first (dvc pull, or make pipeline)")
    for line_no, line in text_lines(path, compressed=path.suffix == ".gz"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}, line {line_no}: not valid JSON ({err}); fix or delete the line") from err
        if not isinstance(obj, dict):
            raise DataError(f"{path}, line {line_no}: a {type(obj).__name__}, not a JSON object; write one object a line")
        for c in columns:
            if c not in obj:
                raise DataError(f"{path}, line {line_no}: no key {c!r} (keys: {', '.join(obj)}); name the right column "
                                "or add the key")
        rows.append([as_text(obj[c]) for c in columns])
        numbers.append(line_no)
    if not rows:
        raise DataError(f"{path} has no rows; expected one JSON object a line with the keys {', '.join(columns)}")
    out = pd.DataFrame(rows, columns=columns, dtype=object)
    out["row"] = numbers
    return out


def as_text(value: object) -> str | None:
    """A cell as the string it reads as (an integral float as an integer: parquet's 1.0 is label "1")."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


def require_texts(df: pd.DataFrame, path: Path, column: str) -> None:
    """DataError at the first empty text or one holding a lone UTF-16 surrogate (JSON's \\ud800 escapes)."""
    for row, text in zip(df["row"], df["text"]):
        if text is None or not text.strip():
            raise DataError(f"{where(path, row)}, column {column!r}: the text is empty; fill it in or delete the row")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise DataError(f"{where(path, row)}, column {column!r}: a lone UTF-16 surrogate {text[err.start]!r} at "
                            f"character {err.start + 1}, which is no character; fix or delete that escape") from err


def read_labelled(spec: Description, split: str, raw: Path = RAW) -> pd.DataFrame:
    """A split's files as one table: ``text``, ``label`` (class index), ``group`` (when the description groups by a
    column). DataError at the first empty text or label outside ``labels``."""
    codes = spec.codes
    by_column = spec.group is not None and spec.group != PHRASES
    columns = [spec.text, spec.label] + ([spec.group] if by_column else [])
    tables = []
    for name in getattr(spec.files, split):
        path = raw / name
        df = read_columns(path, columns).rename(columns={spec.text: "text"})
        require_texts(df, path, spec.text)
        known = df[spec.label].isin(codes.keys())
        if not known.all():
            row, value = df["row"][~known].iloc[0], df[spec.label][~known].iloc[0]
            raise DataError(f"{where(path, row)}, column {spec.label!r}: label {value!r} is not one of {list(codes)}; "
                            f"fix the row or add the class to labels in {description_path(spec.name)}")
        df["label"] = df[spec.label].map(codes).astype("int64")
        if by_column:
            df["group"] = df[spec.group]
        tables.append(df[["text", "label", *(["group"] if by_column else [])]])
    if not tables:
        return pd.DataFrame({"text": pd.Series(dtype=str), "label": pd.Series(dtype="int64")})
    return pd.concat(tables, ignore_index=True)


def read_unlabelled(spec: Description, raw: Path = RAW) -> pd.DataFrame:
    """The description's unlabelled texts (``text``), or an empty table."""
    if spec.unlabelled is None:
        return pd.DataFrame({"text": pd.Series(dtype=str)})
    tables = []
    for name in spec.unlabelled.files:
        path = raw / name
        df = read_columns(path, [spec.unlabelled.text]).rename(columns={spec.unlabelled.text: "text"})
        require_texts(df, path, spec.unlabelled.text)
        tables.append(df[["text"]])
    return pd.concat(tables, ignore_index=True)


# ---------------------------------------------------------------------------------------------- preparing


BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
MIN_CHARS = 2  # shorter texts (after normalisation) are dropped


def normalise(text: str) -> str:
    """``<br>`` tags and runs of whitespace (what ``str.isspace`` calls whitespace, as regex ``\\s`` does) as one
    space, none at either end. ``split``/``join`` rather than a regex: 3-4x faster on IMDb's 100k reviews."""
    return " ".join((BR.sub(" ", text) if "<" in text else text).split())


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


def hash_unit(keys: pd.Series, salt: str) -> np.ndarray:
    """Each key's salted sha256 as a number in [0, 1): the same key, the same number, on any host and row order."""
    return np.fromiter((int.from_bytes(hashlib.sha256(f"{salt}\0{k}".encode()).digest()[:8], "big") / 2.0**64
                        for k in keys), dtype=np.float64, count=len(keys))


def carve(df: pd.DataFrame, fraction: float, salt: str, group: str | None) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(rest, held out, dropped): the rows whose key hashes below ``fraction`` held out. The key is the text, the
    ``group`` column's value, or with ``group: phrases`` the sentence: only whole sentences (root phrases) are held
    out, and the phrases inside a held-out sentence leave the rest, counted in ``dropped``."""
    if group == PHRASES:
        texts = df["text"].tolist()
        roots = df[root_phrases(texts)]
        held = roots[hash_unit(roots["text"], salt) < fraction]
        inside = inside_any(texts, held["text"])
        return df[~inside].reset_index(drop=True), held.reset_index(drop=True), int(inside.sum()) - len(held)
    mask = hash_unit(df["group"] if group else df["text"], salt) < fraction
    return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True), 0


def require_classes(table: pd.DataFrame, names: tuple[str, ...], where: str, fix: str) -> None:
    """DataError naming the first class with no row in ``table``."""
    counts = np.bincount(table["label"].to_numpy(), minlength=len(names))
    if (counts == 0).any():
        name = names[int(np.argmin(counts))]
        raise DataError(f"{where}: class {name!r} has no row in it; {fix}")


def sample(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    if n is None or n >= len(df):
        return df
    return df.sample(n=n, random_state=seed).reset_index(drop=True)


@dataclass
class Splits:
    """A description's prepared train / val / test, and what preparing them dropped."""

    train: pd.DataFrame
    val: pd.DataFrame
    test: pd.DataFrame
    dropped: dict[str, dict[str, int]]
    carved: list[str]


def prepare_splits(spec: Description, cfg: PrepareParams, raw: Path) -> Splits:
    """Read, clean, de-leak and (where a split has no files) carve a description's labelled splits."""
    names, group = spec.class_names, spec.group
    read = {split: clean(read_labelled(spec, split, raw), MIN_CHARS, labelled=True)
            for split in SPLITS if getattr(spec.files, split)}
    train, dropped = read["train"], {"train": read["train"].dropped}
    carved = []
    for split in ("test", "validation"):
        if split in read:
            leaked = train.table["text"].isin(set(read[split].table["text"]))
            train.dropped[f"in_{split}"] = int(leaked.sum())
            train.table = train.table[~leaked].reset_index(drop=True)
            dropped[split] = read[split].dropped
    out: dict[str, pd.DataFrame] = {}
    for split, key in (("test", "test"), ("validation", "val")):
        if split in read:
            out[key] = read[split].table
            continue
        fraction = cfg.test_fraction if key == "test" else cfg.val_fraction
        train.table, out[key], inside = carve(train.table, fraction, f"{cfg.seed}:{key}", group)
        if group == PHRASES:
            train.dropped[f"inside_{key}"] = inside
        where = f"{description_path(spec.name)}: the {split} split carved from {', '.join(spec.files.train)}"
        require_classes(out[key], names, where, f"add rows of it, raise prepare.{key}_fraction, or give {split} files")
        carved.append(split)
    require_classes(train.table, names, f"{', '.join(spec.files.train)} (after the splits are carved)",
                    "add rows of it or remove the class from labels")
    columns = ["text", "label"]
    return Splits(train.table[columns], out["val"][columns], out["test"][columns], dropped, carved)


def class_counts(table: pd.DataFrame, names: tuple[str, ...]) -> dict[str, int]:
    counts = np.bincount(table["label"].to_numpy(), minlength=len(names))
    return {name: int(n) for name, n in zip(names, counts)}
