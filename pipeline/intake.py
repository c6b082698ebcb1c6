"""Bringing a team's own labelled texts in: ``minibert data add``, ``data append`` and ``data check``.

``add`` takes the files as exported (CSV, TSV, JSON Lines or Parquet, gzipped or not), tells train /
validation / test apart by their names, reads the label set from them, validates every row the way
``prepare`` will read it (and carves the missing splits to prove every class can be stratified), then
copies the files byte for byte to ``data/raw/<name>/`` (so its DVC digest equals that of any remote
already holding the same files), ``dvc add``s the folder and writes ``datasets/<name>.yaml``. On any
error nothing is written. ``add_from_hub`` does the same for a dataset ``datasets.load_dataset`` reads (a
Hub id at a pinned revision), its splits exported as parquet files first. ``append`` brings a later drop of labelled rows (a new train* file) in beside
them the same way and lists it in the description, so the next run sees a new data digest. ``check`` re-reads a description's files the same way. Duplicates and test
texts also in train are not errors (``prepare`` drops and counts them); ``--strict`` makes them errors.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from minibert.validation import ConfigError
from pipeline import datasets
from pipeline.io import DataError, atomic_path
from pipeline.params import NAME, PrepareParams

ROLES = (("train", "train"), ("val", "validation"), ("dev", "validation"), ("test", "test"))  # a name's prefix: its split
STRICT = ("duplicates", "conflicting_labels", "in_test", "in_validation")  # what --strict refuses
INTEGER = re.compile(r"-?\d+")


def role(path: Path) -> str:
    stem = path.name.split(".")[0].lower()
    for prefix, split in ROLES:
        if stem.startswith(prefix):
            return split
    raise DataError(f"{path}: cannot tell its split from its name; name it train*, validation* (or dev*) or test* "
                    "(a missing validation or test split is carved from train)")


def label_set(paths: list[Path], text: str, label: str, names: list[str] | None) -> dict[str, str] | list[str]:
    """The description's ``labels``: string labels as themselves (sorted, or in ``names``' order); integer labels
    as {value: name}, named by ``names`` in numeric order (or by their own value)."""
    values: set[str] = set()
    for path in paths:
        df = datasets.read_columns(path, [text, label])
        missing = df[label].isna() | (df[label].astype(str).str.strip() == "")
        if missing.any():
            raise DataError(f"{datasets.where(path, int(df['row'][missing].iloc[0]))}, column {label!r}: the label is empty; "
                            "fill it in or delete the row")
        values |= set(df[label].astype(str))
    if all(INTEGER.fullmatch(v) for v in values):
        ordered = sorted(values, key=int)
        if names is not None and len(names) != len(ordered):
            raise DataError(f"--labels names {len(names)} classes but the files hold {len(ordered)} label values "
                            f"({', '.join(ordered)}); name each value, in numeric order")
        return dict(zip(ordered, names or ordered, strict=True))
    if names is not None:
        if set(names) != values:
            raise DataError(f"--labels {','.join(names)} differs from the labels in the files ({', '.join(sorted(values))}); "
                            "list exactly those, in the order you want")
        return list(names)
    return sorted(values)


@dataclass(frozen=True)
class Checked:
    spec: datasets.Description
    summary: str  # what a user reads: rows per split and class, what prepare will drop


def check(spec: datasets.Description, cfg: PrepareParams, raw: Path, strict: bool) -> Checked:
    """Read and prepare ``spec``'s splits as ``prepare`` will; DataError on a bad row, a class too small to carve a
    split from, and (``strict``) any duplicate, conflicting or leaking text."""
    splits = datasets.prepare_splits(spec, cfg, raw)
    if strict:
        found = [f"{n} {kind.replace('_', ' ')} in the {split} files" for split, counts in splits.dropped.items()
                 for kind, n in counts.items() if kind in STRICT and n]
        if found:
            raise DataError(f"{datasets.description_path(spec.name)}: {'; '.join(found)}; --strict refuses them: clean the "
                            "files (or leave --strict out: prepare keeps one copy of a duplicate, none when the labels "
                            "disagree, and drops a test text from train)")
    names = spec.class_names
    lines = [f"{spec.name}: {len(names)} classes ({', '.join(names)})"]
    for split, table in (("train", splits.train), ("validation", splits.val), ("test", splits.test)):
        counts = datasets.class_counts(table, names)
        carved = " (carved from train)" if split in splits.carved else ""
        lines.append(f"  {split:<10} {len(table):>7} rows{carved}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    dropped = {f"{split} {kind.replace('_', ' ')}": n for split, counts in splits.dropped.items() for kind, n in counts.items() if n}
    lines.append("  dropped: " + (", ".join(f"{k} {v}" for k, v in dropped.items()) or "nothing"))
    return Checked(spec, "\n".join(lines))


def add_from_hub(dataset_id: str, revision: str | None, text: str, label: str, name: str | None, names: list[str] | None,
                 group: str | None, cfg: PrepareParams, strict: bool, raw: Path = datasets.RAW,
                 descriptions: Path = datasets.DESCRIPTIONS, dvc_env: dict[str, str] | None = None) -> Checked:
    """``add`` for a dataset loaded with ``datasets.load_dataset``: a Hub id at a pinned ``revision`` (a local
    folder needs none). Its splits are exported as parquet (``pipeline.hub.export_splits``: ``train.parquet``,
    ``test.parquet``, ...) and added as files are; the description records the id and the revision."""
    import tempfile

    from pipeline.hub import export_splits

    local = Path(dataset_id).is_dir()
    if not local and not revision:
        raise DataError(f"--hub {dataset_id}: pin the revision (--revision, a commit sha or tag from the dataset's "
                        "page), so that the files can be fetched again as they were")
    name = name or re.sub(r"[^A-Za-z0-9_-]+", "-", Path(dataset_id).name if local else dataset_id.split("/")[-1]).lower()
    with tempfile.TemporaryDirectory(prefix="minibert-hub-") as tmp:
        paths = export_splits(dataset_id, None if local else revision, Path(tmp))
        return add(paths, text, label, name, names, group, cfg, strict, raw, descriptions, dvc_env,
                   source=datasets.Hub(str(Path(dataset_id).resolve()) if local else dataset_id, revision))


def add(paths: list[Path], text: str, label: str, name: str | None, names: list[str] | None, group: str | None,
        cfg: PrepareParams, strict: bool, raw: Path = datasets.RAW, descriptions: Path = datasets.DESCRIPTIONS,
        dvc_env: dict[str, str] | None = None, source: datasets.Hub | None = None) -> Checked:
    """Validate ``paths``, copy them to ``raw/<name>/``, ``dvc add`` it, write ``descriptions/<name>.yaml``
    (``source``: the Hub dataset the files were exported from)."""
    if not paths:
        raise DataError("give the files to add: minibert data add FILE... --text COLUMN --label COLUMN")
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        if datasets.file_format(path) is None:
            raise DataError(f"{path}: no known format; name it *.csv, *.tsv, *.jsonl or *.parquet (each may end in .gz)")
    name = name or paths[0].resolve().parent.name
    if not NAME.fullmatch(name):
        raise DataError(f"dataset name {name!r}: use letters, digits, '_' and '-' (give one with --name)")
    if len({p.name for p in paths}) != len(paths):
        raise DataError("two files share a name; rename one (they are copied into one folder)")
    target, description = raw / name, datasets.description_path(name, descriptions)
    for existing in (target, description, raw / f"{name}.dvc"):
        if existing.exists():
            raise DataError(f"{existing} exists: dataset {name!r} is already added; pick another --name, or put new files "
                            f"in {target}/, list them in {description} and run `minibert data check {name}`")
    files: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for path in paths:
        files[role(path)].append(f"{name}/{path.name}")
    if not files["train"]:
        raise DataError("no training file among them: one file's name must start with 'train'")
    labels = label_set(paths, text, label, names)
    try:
        spec = datasets.Description(files=datasets.Files(**{k: tuple(v) for k, v in files.items()}), text=text,
                                    label=label, labels=labels, group=group, hub=source, name=name)
    except ConfigError as err:
        raise DataError(f"{name}: {err}") from None
    created = [folder for folder in (raw.parent, raw, descriptions) if not folder.exists()]
    try:
        with atomic_path(target) as staged:  # renamed to raw/<name> only when everything below passed
            staged.mkdir()
            for path in paths:
                shutil.copyfile(path, staged / path.name)
            checked = check(spec, cfg, staged.parent, strict)
            with atomic_path(description) as tmp:
                origin = f"--hub {source.id} at revision {source.revision or 'local'}" if source else ", ".join(map(str, paths))
                tmp.write_text(f"# Added by `minibert data add` from {origin}\n" + datasets.dump(spec))
    except BaseException:
        for folder in reversed(created):  # the folders made on the way, if they stayed empty
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    try:
        dvc_add(target, dvc_env, "nothing was added")
    except DataError:
        shutil.rmtree(target, ignore_errors=True)
        description.unlink(missing_ok=True)
        raise
    return checked


def dvc_add(target: Path, env: dict[str, str] | None, outcome: str) -> None:
    """``dvc add target``; DataError with dvc's last line of complaint and ``outcome``."""
    try:
        subprocess.run(["dvc", "add", "--quiet", str(target)], check=True, env=env, capture_output=True, text=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        detail = (getattr(err, "stderr", "") or str(err)).strip()
        raise DataError(f"dvc add {target} failed ({detail.splitlines()[-1] if detail else err}); {outcome}") from err


def append(name: str, paths: list[Path], cfg: PrepareParams, strict: bool, raw: Path = datasets.RAW,
           descriptions: Path = datasets.DESCRIPTIONS, dvc_env: dict[str, str] | None = None) -> Checked:
    """A drop of new labelled rows: validate ``paths`` against dataset ``name``'s description (its columns and
    classes), copy them beside its files, list them in ``descriptions/<name>.yaml`` (comments kept) and ``dvc add``
    the folder, so that the next ``dvc repro`` sees a new data digest. The test split of record never grows: a
    test file is refused. On any error the copies and the description are undone."""
    spec = datasets.load(name, descriptions)
    if not paths:
        raise DataError(f"give the files to append: minibert data append {name} FILE...")
    folder = Path(spec.files.train[0]).parts[0]
    target = raw / folder
    if not target.is_dir():
        raise DataError(f"{target} not found; pull the data first (dvc pull {target}.dvc), then append")
    listed = {*spec.files.train, *spec.files.validation, *spec.files.test}
    if len({p.name for p in paths}) != len(paths):
        raise DataError("two files share a name; rename one (they are copied into one folder)")
    added: dict[str, list[str]] = {"train": [], "validation": []}
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        if datasets.file_format(path) is None:
            raise DataError(f"{path}: no known format; name it *.csv, *.tsv, *.jsonl or *.parquet (each may end in .gz)")
        split, rel = role(path), f"{folder}/{path.name}"
        if split == "test":
            raise DataError(f"{path}: a test file; the test split of record stays fixed, so that a challenger is scored "
                            f"on the rows its champion was: name the file train* (or add a new dataset with data add)")
        if split == "validation" and not spec.files.validation:
            raise DataError(f"{path}: {name}'s validation split is carved from train; name the file train* and its "
                            "rows are carved by the same hash")
        if (target / path.name).exists() or rel in listed:
            raise DataError(f"{target / path.name} exists: a drop needs a new file name (e.g. train-2026-12.csv); to "
                            f"replace that file, copy it over and run `dvc add {target}` and `minibert data check {name}`")
        added[split].append(rel)
    extended = replace(spec, files=datasets.Files(train=(*spec.files.train, *added["train"]), test=spec.files.test,
                                                  validation=(*spec.files.validation, *added["validation"])))
    rows = {c: 0 for c in spec.class_names}
    for path in paths:  # each drop read where it lies, so that a message names the user's file
        one = replace(spec, files=datasets.Files(train=(path.name,)))
        for c, n in datasets.class_counts(datasets.read_labelled(one, "train", path.parent), spec.class_names).items():
            rows[c] += n
    description = datasets.description_path(name, descriptions)
    original = description.read_text()
    copied: list[Path] = []
    try:
        for path in paths:
            copied.append(target / path.name)
            shutil.copyfile(path, target / path.name)
        checked = check(extended, cfg, raw, strict)
        with atomic_path(description) as tmp:
            tmp.write_text(with_files(original, added))
        datasets.load(name, descriptions)  # what was written reads back
        dvc_add(target, dvc_env, "nothing was appended")
    except BaseException:
        for path in copied:
            path.unlink(missing_ok=True)
        if description.read_text() != original:
            description.write_text(original)
        raise
    line = f"  appended {sum(rows.values())} rows: " + ", ".join(f"{k} {v}" for k, v in rows.items())
    return Checked(extended, f"{checked.summary}\n{line}")


def with_files(text: str, added: dict[str, list[str]]) -> str:
    """A description's YAML with ``added`` paths appended to its ``files`` lists, its comments and layout kept."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    doc = yaml.load(text)
    for split, paths in added.items():
        if paths:
            if doc["files"].get(split):
                doc["files"][split].extend(paths)
            else:
                doc["files"][split] = list(paths)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()
