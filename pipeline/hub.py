"""Raw data from the Hugging Face Hub: the ``data.source: hub`` way to ``data/raw/`` for users with a
network, instead of ``dvc pull``, and what ``minibert data add --hub`` exports.

A dataset description (``pipeline.datasets``) may name the Hub dataset its folder comes from
(``hub: {id, revision, layout}``); ``fetch_sources`` writes each such folder. The layout says how the
Hub's splits become files (``LAYOUTS``): ``parquet`` writes ``<split>.parquet`` with every column; the
other two write the formats of the DVC mirror described in ``shared/data/README.md``, GLUE's TSV
files and aclImdb's JSON Lines, so a description reads either source with the same code::

    glue_tsv        train.tsv, dev.tsv   header "sentence<TAB>label", one "<sentence><TAB><0|1>" a line
                    test.tsv             header "index<TAB>sentence", no labels
    aclimdb_jsonl   {train,test,unsup}.jsonl.gz
                                         one {"id", "label", "rating", "text"} object a line, UTF-8 kept
                                         unescaped (json.dumps(ensure_ascii=False)), gzip level 9, mtime 0

SST-2 text is written exactly as the Hub gives it (GLUE keeps a space before the tab; nothing is
stripped or added); a sentence containing a tab, CR or newline is refused, since GLUE's TSV has no
quoting to carry one. Departures from the mirror, all on IMDb, because the Hub copy
(``stanfordnlp/imdb``: columns text, label only) lacks what aclImdb's file names carry:

1. ``id`` is ``"{split}/{row}"`` (``train/17``, ``unsup/3``: the position in the Hub split), not
   aclImdb's ``"train/pos/0_9"``.
2. ``rating`` is 0 on every row: the Hub copy has no ratings. Nothing downstream may read it.
3. Rows keep the Hub's order, not the mirror's sort by split, label and id (shuffle before use,
   as for the mirror).
4. The ``.gz`` files come from Python's zlib (level 9, mtime 0, no file name, the same 10-byte
   header as the mirror's); the mirror's were made by GNU ``gzip -9 -n``, so the compressed bytes
   and their sha256 differ while the decompressed text has the same format.

Writes are atomic per folder and all or nothing across folders: every file is written into a hidden
temporary folder beside its target, and only when all of them are complete are the old folders swapped out. A
failure leaves an existing layout untouched and no partial one behind. The target folder is
replaced as a whole (it holds exactly the layout, as DVC tracks it); new files are written, never
old ones overwritten in place, so files that DVC linked from its cache are never modified.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.datasets import Hub, hub_sources

_BATCH = 10_000  # rows read from Arrow at a time
_TRUE = {"1", "ON", "YES", "TRUE"}  # how huggingface_hub reads its boolean variables
_TSV_FORBIDDEN = {"\t": "a tab", "\n": "a newline", "\r": "a carriage return"}


@dataclass(frozen=True)
class _FileSpec:
    """One file of the layout: which Hub split feeds it and which columns it needs."""

    split: str  # the Hub split name
    columns: tuple[str, ...]  # Hub columns read, in the order the writer takes them
    labels: frozenset[int]  # allowed label values; empty when the file carries no label


SST2_FILES: dict[str, _FileSpec] = {
    "train.tsv": _FileSpec("train", ("sentence", "label"), frozenset({0, 1})),
    "dev.tsv": _FileSpec("validation", ("sentence", "label"), frozenset({0, 1})),
    "test.tsv": _FileSpec("test", ("idx", "sentence"), frozenset()),  # Hub test labels are -1: not written
}
IMDB_FILES: dict[str, _FileSpec] = {
    "train.jsonl.gz": _FileSpec("train", ("text", "label"), frozenset({0, 1})),
    "test.jsonl.gz": _FileSpec("test", ("text", "label"), frozenset({0, 1})),
    "unsup.jsonl.gz": _FileSpec("unsupervised", ("text", "label"), frozenset({-1})),
}
_IMDB_ID_PREFIX = {"train": "train", "test": "test", "unsupervised": "unsup"}  # the mirror's split names


# --- loading and validation ---------------------------------------------------------------------


def _load(dataset_id: str, revision: str | None, cache_dir: Path | None) -> Mapping[str, Any]:
    """All splits of ``dataset_id`` (a Hub id or a local folder) as a ``DatasetDict``."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a declared dependency
        raise ImportError("pipeline.hub needs the `datasets` package: pip install 'datasets>=5.2,<6'") from err
    try:
        loaded = datasets.load_dataset(
            dataset_id, revision=revision, cache_dir=None if cache_dir is None else str(cache_dir)
        )
    except (ConnectionError, FileNotFoundError) as err:
        offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if os.environ.get(v, "").upper() in _TRUE]
        hint = f" {' and '.join(offline)} set: unset to reach the Hub, or" if offline else ""
        kind = ConnectionError if isinstance(err, ConnectionError) else FileNotFoundError
        raise kind(
            f"could not load dataset {dataset_id!r} (revision {revision or 'default'}): {err}.{hint} "
            "check the id and the network, or pass a local folder; without a network use the DVC "
            "mirror instead (`dvc pull`, see shared/data/README.md)"
        ) from err
    except datasets.exceptions.DatasetGenerationError as err:  # e.g. one split's files lack a column
        cause = " ".join(str(err.__cause__ or err).split())[:300]
        raise ValueError(
            f"{dataset_id}: its data files do not load as one table ({cause}); every split must have "
            "the same columns: fix or re-export the files"
        ) from err
    if not isinstance(loaded, datasets.DatasetDict):  # pragma: no cover - load_dataset without split= gives one
        raise ValueError(f"{dataset_id}: expected a dataset with named splits, got {type(loaded).__name__}")
    return loaded


def _check(dataset_id: str, loaded: Mapping[str, Any], files: Mapping[str, _FileSpec], reference: str) -> None:
    """Raise ValueError naming the dataset, split and column when a split or column is missing."""
    for spec in files.values():
        if spec.split not in loaded:
            raise ValueError(
                f"{dataset_id}: split {spec.split!r} is missing (found: {', '.join(sorted(loaded))}); "
                f"pass a dataset with {reference}'s splits {sorted({s.split for s in files.values()})}"
            )
        found = loaded[spec.split].column_names
        for column in spec.columns:
            if column not in found:
                raise ValueError(
                    f"{dataset_id}, split {spec.split!r}: column {column!r} is missing (found: {', '.join(found)}); "
                    f"pass a dataset with {reference}'s columns {list(spec.columns)}"
                )


def _rows(dataset: Any, columns: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """The values of ``columns`` row by row, read from Arrow in batches."""
    for batch in dataset.select_columns(list(columns)).iter(batch_size=_BATCH):
        yield from zip(*(batch[c] for c in columns))


def _checked_label(value: Any, spec: _FileSpec, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in spec.labels:
        raise ValueError(f"{where}: label {value!r} is not one of {sorted(spec.labels)}")
    return value


def _checked_text(value: Any, where: str, column: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {column} is {type(value).__name__} {value!r}, expected a string")
    return value


# --- serialisation: one line each, the mirror's exact format ------------------------------------


def tsv_line(first: str, second: str, where: str) -> str:
    """One GLUE TSV line ``first<TAB>second\\n``; GLUE has no quoting, so a tab or newline is refused."""
    for field in (first, second):
        for char, name in _TSV_FORBIDDEN.items():
            if char in field:
                raise ValueError(
                    f"{where}: the text contains {name} ({field[:60]!r}...), which GLUE's unquoted TSV "
                    "cannot hold; SST-2 has none: check that the dataset id points at SST-2"
                )
    return f"{first}\t{second}\n"


def jsonl_line(id_: str, label: int, rating: int, text: str) -> str:
    """One IMDb line as the mirror writes it: keys in this order, non-ASCII kept, controls escaped."""
    return json.dumps({"id": id_, "label": label, "rating": rating, "text": text}, ensure_ascii=False) + "\n"


def _write_text(path: Path, lines: Iterable[str]) -> int:
    """Write UTF-8 lines with "\\n" endings on every platform; returns the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line)
            n += 1
    return n


def _write_gzip(path: Path, lines: Iterable[str]) -> int:
    """Gzip level 9 with mtime 0, no file name and OS byte 3 (zlib's gzip wrapper): deterministic."""
    n = 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip header and trailer
    with open(path, "wb") as f:
        for line in lines:
            f.write(compressor.compress(line.encode("utf-8")))
            n += 1
        f.write(compressor.flush())
    return n


# --- the two layouts -----------------------------------------------------------------------------


def _sst2_labelled(dataset_id: str, spec: _FileSpec, rows: Iterator[tuple[Any, ...]]) -> Iterator[str]:
    yield tsv_line("sentence", "label", "header")
    for i, (sentence, label) in enumerate(rows):
        where = f"{dataset_id}, split {spec.split!r}, row {i}"
        text = _checked_text(sentence, where, "sentence")
        yield tsv_line(text, str(_checked_label(label, spec, where)), where)


def _sst2_test(dataset_id: str, spec: _FileSpec, rows: Iterator[tuple[Any, ...]]) -> Iterator[str]:
    yield tsv_line("index", "sentence", "header")
    for i, (idx, sentence) in enumerate(rows):
        where = f"{dataset_id}, split {spec.split!r}, row {i} (idx {idx!r})"
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise ValueError(f"{where}: idx {idx!r} is not an integer")
        yield tsv_line(str(idx), _checked_text(sentence, where, "sentence"), where)


def _imdb_lines(dataset_id: str, spec: _FileSpec, rows: Iterator[tuple[Any, ...]]) -> Iterator[str]:
    prefix = _IMDB_ID_PREFIX[spec.split]
    for i, (text, label) in enumerate(rows):
        where = f"{dataset_id}, split {spec.split!r}, row {i}"
        label = _checked_label(label, spec, where)
        yield jsonl_line(f"{prefix}/{i}", label, 0, _checked_text(text, where, "text"))


def _write_sst2(dataset_id: str, loaded: Mapping[str, Any], folder: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, spec in SST2_FILES.items():
        make_lines = _sst2_test if name == "test.tsv" else _sst2_labelled
        lines = make_lines(dataset_id, spec, _rows(loaded[spec.split], spec.columns))
        counts[name] = _write_text(folder / name, lines) - 1  # less the header
    return counts


def _write_imdb(dataset_id: str, loaded: Mapping[str, Any], folder: Path) -> dict[str, int]:
    return {
        name: _write_gzip(folder / name, _imdb_lines(dataset_id, spec, _rows(loaded[spec.split], spec.columns)))
        for name, spec in IMDB_FILES.items()
    }


# --- atomic replacement --------------------------------------------------------------------------


def _staged(target: Path, write: Callable[[Path], dict[str, int]]) -> tuple[Path, dict[str, int]]:
    """Run ``write`` into a fresh hidden folder beside ``target``; removed again if it fails."""
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target} exists and is not a folder; move it away and run again")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        return tmp, write(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _commit(tmp: Path, target: Path) -> None:
    """Swap the complete folder ``tmp`` in for ``target`` (two renames; the old one is restored on failure)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --- public API ----------------------------------------------------------------------------------


UNLABELLED_SPLITS = frozenset({"unsupervised"})  # Hub splits without labels (IMDb's): not a labelled file to add


def _write_parquet(dataset_id: str, loaded: Mapping[str, Any], folder: Path) -> dict[str, int]:
    """Every labelled split as ``folder/<split>.parquet``, every column kept (what ``minibert data add --hub`` brings in)."""
    counts = {}
    for split, dataset in loaded.items():
        if split in UNLABELLED_SPLITS:
            continue
        dataset.to_pandas().to_parquet(folder / f"{split}.parquet", index=False)
        counts[f"{split}.parquet"] = len(dataset)
    return counts


@dataclass(frozen=True)
class _Layout:
    files: Mapping[str, _FileSpec] | None  # the splits and columns it needs; None: whatever the dataset has
    write: Callable[[str, Mapping[str, Any], Path], dict[str, int]]
    reference: str  # how an error names what was expected


# A Hub source's ``layout`` (``pipeline.datasets.Hub``): how its splits become the files of one data/raw folder.
# glue_tsv and aclimdb_jsonl write the DVC mirror's formats, so a description reads either source unchanged.
LAYOUTS: dict[str, _Layout] = {
    "parquet": _Layout(None, _write_parquet, "any splits"),
    "glue_tsv": _Layout(SST2_FILES, _write_sst2, "GLUE SST-2 (stanfordnlp/sst2)"),
    "aclimdb_jsonl": _Layout(IMDB_FILES, _write_imdb, "IMDb (stanfordnlp/imdb)"),
}


def _loaded(dataset_id: str, layout: str, revision: str | None, cache_dir: Path | None) -> tuple[Mapping[str, Any], _Layout]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {sorted(LAYOUTS)}")
    spec = LAYOUTS[layout]
    loaded = _load(dataset_id, revision, cache_dir)
    if spec.files is not None:
        _check(dataset_id, loaded, spec.files, spec.reference)
    return loaded, spec


def fetch(out_dir: Path, dataset_id: str, layout: str, revision: str | None = None, *,
          cache_dir: Path | None = None) -> dict[str, int]:
    """Write the files of ``layout`` (``LAYOUTS``) from ``dataset_id`` into ``out_dir``, replacing it whole; rows per file.

    ``dataset_id`` is a Hub id or a local folder laid out like a Hub repo (``data/train-00000-of-00001.parquet``,
    ...); ``revision`` pins a branch, tag or commit; ``cache_dir`` goes to ``datasets.load_dataset``.
    glue_tsv needs splits train, validation, test with columns sentence, label (test: idx, sentence);
    aclimdb_jsonl splits train, test, unsupervised with columns text, label (0/1; -1 unsupervised): its ``id``
    is ``"{split}/{row}"`` and ``rating`` 0 (the module docstring). Raises ValueError for a missing split or
    column, a label outside the layout's or a text its format cannot hold; ConnectionError /
    FileNotFoundError when the dataset cannot be loaded.
    """
    out_dir = Path(out_dir)
    return fetch_sources(out_dir.parent, {out_dir.name: Hub(dataset_id, revision, layout)}, cache_dir=cache_dir)[out_dir.name]


def fetch_sources(raw_dir: Path, sources: Mapping[str, Hub], revision: str | None = None, *,
                  cache_dir: Path | None = None) -> dict[str, dict[str, int]]:
    """``raw_dir/<folder>`` from each ``folder -> Hub`` source (``pipeline.datasets.hub_sources``), at the source's
    revision, else ``revision`` (``data.hub_revision``); rows per file, keyed by folder.

    Every dataset is loaded, checked and written to a temporary folder before any target is replaced, so
    a failure in one leaves every old folder as it was.
    """
    raw_dir = Path(raw_dir)
    loaded = {folder: _loaded(hub.id, hub.layout, hub.revision or revision, cache_dir) for folder, hub in sources.items()}
    staged: dict[str, tuple[Path, dict[str, int]]] = {}
    try:
        for folder, (data, spec) in loaded.items():
            staged[folder] = _staged(raw_dir / folder, lambda target, d=data, w=spec.write, i=sources[folder].id: w(i, d, target))
    except BaseException:
        for tmp, _ in staged.values():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    for folder, (tmp, _) in staged.items():
        _commit(tmp, raw_dir / folder)
    return {folder: counts for folder, (_, counts) in staged.items()}


def export_splits(dataset_id: str, revision: str | None, folder: Path, *, cache_dir: Path | None = None) -> list[Path]:
    """Any dataset's labelled splits (``datasets.load_dataset``: a Hub id at ``revision``, or a local folder) written as
    ``folder/<split>.parquet``, one file a split, every column kept: the files ``minibert data add --hub`` brings in,
    and what the ``parquet`` layout fetches again."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = _write_parquet(dataset_id, _load(dataset_id, revision, cache_dir), folder)
    return [folder / name for name in counts]


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.hub --dataset NAME``: fetch the Hub sources of the folders a dataset reads, print rows per file."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.hub", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="a description in datasets/ (with its intermediate task)")
    parser.add_argument("--raw-dir", type=Path, default=Path("data/raw"))
    parser.add_argument("--revision", default=None, help="for a source whose description pins none")
    args = parser.parse_args(argv)
    for folder, files in fetch_sources(args.raw_dir, hub_sources(args.dataset), args.revision).items():
        for name, rows in files.items():
            print(f"{args.raw_dir / folder / name}: {rows} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
