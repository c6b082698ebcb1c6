"""What changed in the training data between two pipeline runs: rows added and removed per class, rows
relabelled, the share of the added rows' words the old training set never had (the new-vocabulary rate), and
the label shift (the total variation distance between the two class distributions). ``minibert pipeline`` and
the retrain flow take a ``Snapshot`` of the prepared data before ``dvc repro`` and compare it with what the run
prepared; the record goes to the pipeline's MLflow run and beside the promotion decision.

The tables compared are the prepared ones, what the models train on: with ``prepare.max_train_rows`` set, a
drop also moves which rows the sample holds.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.splits import load_split, prepared

WORD = re.compile(r"\w+")
METRIC_UNSAFE = re.compile(r"[^\w\-. /]")  # what an MLflow metric name may not hold


@dataclass(frozen=True)
class Snapshot:
    classes: tuple[str, ...]
    train: pd.DataFrame  # text, label (an index into classes)
    test_texts: frozenset[str]


def snapshot(data_dir: Path) -> Snapshot | None:
    """The prepared data under ``data_dir``, or None where no run prepared any yet."""
    try:
        contract = prepared(data_dir)
        train, test = load_split(data_dir, "train"), load_split(data_dir, "test")
    except (OSError, ValueError):
        return None
    return Snapshot(contract.labels, train[["text", "label"]], frozenset(test["text"]))


def words(texts: pd.Series) -> Counter:
    counts: Counter = Counter()
    for text in texts:
        counts.update(WORD.findall(text.lower()))
    return counts


def compare(old: Snapshot, new: Snapshot) -> dict:
    """The change from ``old`` to ``new`` (classes by name, so a class added or reordered compares right)."""
    before = dict(zip(old.train["text"], (old.classes[i] for i in old.train["label"])))
    after = dict(zip(new.train["text"], (new.classes[i] for i in new.train["label"])))
    added = [t for t in after if t not in before]
    removed = [t for t in before if t not in after]
    relabelled = sum(1 for t, c in after.items() if t in before and before[t] != c)
    classes = list(dict.fromkeys([*new.classes, *old.classes]))
    share_before, share_after = class_shares(before.values(), classes), class_shares(after.values(), classes)
    known = words(pd.Series(list(before)))
    fresh = words(pd.Series(added))
    total = sum(fresh.values())
    return {
        "rows_before": len(before), "rows_after": len(after), "rows_added": len(added), "rows_removed": len(removed),
        "rows_relabelled": relabelled,
        "added_per_class": {c: sum(1 for t in added if after[t] == c) for c in classes},
        "removed_per_class": {c: sum(1 for t in removed if before[t] == c) for c in classes},
        "new_vocabulary_rate": (sum(n for w, n in fresh.items() if w not in known) / total) if total else 0.0,
        "label_shift": 0.5 * sum(abs(share_after[c] - share_before[c]) for c in classes),
        "class_share_before": share_before, "class_share_after": share_after,
        "classes_changed": old.classes != new.classes, "test_changed": old.test_texts != new.test_texts,
    }


def class_shares(labels, classes: list[str]) -> dict[str, float]:
    counts = Counter(labels)
    total = sum(counts.values()) or 1
    return {c: counts.get(c, 0) / total for c in classes}


def summary(change: dict | None) -> str:
    """One line for a log: what the run's training data gained and lost."""
    if change is None:
        return "data: no earlier prepared data here to compare with"
    if not (change["rows_added"] or change["rows_removed"] or change["rows_relabelled"] or change["test_changed"]):
        return f"data: unchanged ({change['rows_after']} training rows)"
    per_class = ", ".join(f"{c} +{n}" for c, n in change["added_per_class"].items() if n)
    return (f"data: +{change['rows_added']} / -{change['rows_removed']} training rows ({per_class or 'none added'}), "
            f"{change['rows_relabelled']} relabelled, new-vocabulary rate {change['new_vocabulary_rate']:.3f}, "
            f"label shift {change['label_shift']:.3f}" + ("; the test split changed" if change["test_changed"] else "")
            + ("; the class names changed" if change["classes_changed"] else ""))


def scalars(change: dict) -> dict[str, int | float | bool]:
    """The record's single numbers (rows, rates, flags), without the per-class tables."""
    return {k: v for k, v in change.items() if isinstance(v, (int, float))}


def metrics(change: dict) -> dict[str, float]:
    """The change as flat MLflow metrics (``data_*``)."""
    flat = {f"data_{k}": float(v) for k, v in scalars(change).items()}
    flat |= {"data_added_" + METRIC_UNSAFE.sub("_", c): float(n) for c, n in change["added_per_class"].items()}
    return flat


def tags(change: dict | None, digest: str) -> dict[str, str]:
    """The change as tags (``data.*``) for a model version and the promote run, with its one-line summary."""
    out = {"data.digest": digest, "data.summary": summary(change)}
    for key, value in scalars(change or {}).items():
        out[f"data.{key}"] = f"{value:.4f}" if isinstance(value, float) else str(value)
    return out
