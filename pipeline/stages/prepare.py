"""prepare: read the task's dataset description, validate and normalise its files, carve the missing
splits, and write the prepared tables with their contract and a report.

Inputs: ``datasets/<data.dataset>.yaml`` (``pipeline.datasets``: files under data/raw/, columns, class names)
and the description it names as intermediate task. Outputs (one folder, written atomically): ``train``,
``val`` and ``test`` (the test split of record), ``intermediate_{train,val,test}`` when there is an
intermediate task, and the pretraining ``corpus`` (the description's unlabelled texts and the training
texts), as parquet tables of ``text`` (and ``label``: the class index); ``dataset.json``, the contract
downstream stages read (the class names, the intermediate task's; not the dataset's own name); a report with counts,
per-class counts, drops and sha256 digests.

Rules: whitespace collapsed and ``<br />`` tags replaced by spaces; texts shorter than ``MIN_CHARS``
dropped; duplicate texts kept once (every copy dropped when their labels disagree); a training text also
in the validation or test files leaves train. A missing test or validation split is carved from train by
a salted hash of each row's text (or of its group: ``group`` names a column, or ``phrases``: whole trees,
the phrases inside a held-out sentence leave training), so a row appended later never moves an old row
between splits; each class's share is the fraction in expectation, and a class left without a row in a
carved split is an error naming it. Unlabelled texts equal to a validation or test text stay out of the
corpus.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import pandas as pd

from minibert.validation import ConfigError
from pipeline import datasets
from pipeline.datasets import MIN_CHARS, class_counts, clean, prepare_splits, sample
from pipeline.io import atomic_path, write_json
from pipeline.params import Params, PrepareParams, load_params
from pipeline.splits import CONTRACT
from pipeline.tracking import stage_run


def run(cfg: PrepareParams, task: str, raw: Path, descriptions: Path = datasets.DESCRIPTIONS) -> tuple[dict[str, pd.DataFrame], dict, dict]:
    """The prepared tables by name, the contract (``dataset.json``) and the report (without digests)."""
    spec = datasets.load(task, descriptions)
    names = spec.class_names
    main = prepare_splits(spec, cfg, raw)
    small = None if cfg.max_train_rows is None else max(cfg.max_train_rows // 5, 1)
    tables = {"train": sample(main.train, cfg.max_train_rows, cfg.seed), "val": sample(main.val, small, cfg.seed),
              "test": sample(main.test, cfg.max_dev_rows, cfg.seed)}
    report: dict = {"dataset": task, "classes": list(names), "carved": main.carved,
                    "dropped": {f"{task}_{split}": d for split, d in main.dropped.items()}}
    contract = {"labels": list(names), "intermediate": None}
    evaluated = set(main.val["text"]) | set(main.test["text"])
    if spec.intermediate:
        other = datasets.load(spec.intermediate, descriptions)
        if other.class_names != names:
            raise ConfigError(f"{datasets.description_path(task, descriptions)}: intermediate: {spec.intermediate} has the "
                              f"classes {list(other.class_names)}, the task {list(names)}; an intermediate task shares the "
                              "task's class names (in order): pick another or remove the key")
        extra = prepare_splits(other, cfg, raw)
        tables.update({"intermediate_train": sample(extra.train, cfg.max_train_rows, cfg.seed),
                       "intermediate_val": sample(extra.val, small, cfg.seed),
                       "intermediate_test": sample(extra.test, cfg.max_dev_rows, cfg.seed)})
        report["dropped"].update({f"{other.name}_{split}": d for split, d in extra.dropped.items()})
        contract["intermediate"] = other.name
        evaluated |= set(extra.val["text"]) | set(extra.test["text"])
    unlabelled = clean(datasets.read_unlabelled(spec, raw), MIN_CHARS, labelled=False)
    scored = unlabelled.table["text"].isin(evaluated)  # scored texts stay out of pretraining
    unlabelled.dropped["in_test_or_val"] = int(scored.sum())
    report["dropped"]["unlabelled"] = unlabelled.dropped
    docs = sample(unlabelled.table[~scored].reset_index(drop=True), cfg.corpus_max_docs, cfg.seed)["text"]
    corpus = pd.concat([docs, tables["train"]["text"]], ignore_index=True)
    tables["corpus"] = pd.DataFrame({"text": corpus.drop_duplicates().reset_index(drop=True)})
    report["rows"] = {name: len(t) for name, t in tables.items()}
    report["classes_per_split"] = {name: class_counts(t, names) for name, t in tables.items() if "label" in t}
    report["corpus_chars"] = int(tables["corpus"]["text"].str.len().sum())
    return tables, contract, report


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=datasets.RAW)
    parser.add_argument("--datasets", type=Path, default=datasets.DESCRIPTIONS)
    parser.add_argument("--out", type=Path, default=Path("data/prepared"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/prepare.json"))
    parser.add_argument("--report", type=Path, default=Path("reports/data.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    spec = datasets.load(params.data.dataset, args.datasets)
    inputs = [args.raw / folder for folder in spec.folders()]
    with stage_run("prepare", params, inputs) as tracker:
        tables, contract, report = run(params.prepare, params.data.dataset, args.raw, args.datasets)
        with atomic_path(args.out) as tmp:
            tmp.mkdir()
            for name, table in tables.items():
                table.to_parquet(tmp / f"{name}.parquet", index=False)
            write_json(contract, tmp / CONTRACT)
        report["sha256"] = {name: sha256(args.out / f"{name}.parquet") for name in tables}
        write_json(report, args.report)
        write_json({"rows": report["rows"], "corpus_chars": report["corpus_chars"]}, args.metrics)
        tracker.log_metrics({f"rows_{k}": v for k, v in report["rows"].items()})
        for name in ("train", "val", "test", "corpus"):
            tracker.log_dataset(tables[name], name, args.out / f"{name}.parquet", context=name)
        tracker.log_artifact(args.report)
        tracker.log_artifact(args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
