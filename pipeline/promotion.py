"""The promotion gate: score challenger and champion on the test split of record, move the
``champion`` alias only when the challenger is at least as good, record every decision.

The decision is a pure function (``decide``) of the two scores and ``PromoteParams``: the
challenger must reach the champion's ``metric`` (accuracy, or macro-F1 where classes are
imbalanced) minus ``margin`` and answer a single text within
``max_p50_ms`` (1 thread). Both models are scored as they are served: the registered pyfunc,
loaded from the registry, on raw text. Every decision is written to the registry (tags on the
challenger's version; ``previous_champion`` on a newly promoted one, which ``rollback``
follows) and to an MLflow run named ``promote`` / ``rollback``.

Two promotions at once stay consistent: each holds an exclusive lock on
``<project>/.minibert/registry.lock`` from reading the champion to moving the alias, so the
second one compares against whatever the first left. (The lock covers processes sharing the
project folder; with a remote tracking server and several machines, run promotions from one.)
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.io import DataError
from pipeline.metrics import LATENCY_ROWS, classification_metrics, percentiles_ms
from pipeline.params import Params, PromoteParams
from pipeline.splits import load_split, prepared

CHAMPION, CHALLENGER = "champion", "challenger"


@dataclass(frozen=True)
class Scores:
    version: str
    accuracy: float
    p50_ms: float
    macro_f1: float


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str


def decide(challenger: Scores, champion: Scores | None, cfg: PromoteParams) -> Decision:
    """Promote iff the challenger is within the latency budget and scores at least the champion's ``cfg.metric``
    minus ``cfg.margin`` (no champion: promote)."""
    if champion is not None and challenger.version == champion.version:
        return Decision(False, f"version {challenger.version} is already the champion")
    if challenger.p50_ms > cfg.max_p50_ms:
        return Decision(False, f"p50 latency {challenger.p50_ms:.2f} ms is over the budget of {cfg.max_p50_ms} ms")
    if champion is None:
        return Decision(True, "there is no champion yet")
    ours, theirs, name = getattr(challenger, cfg.metric), getattr(champion, cfg.metric), cfg.metric
    if ours >= theirs - cfg.margin:
        return Decision(True, f"{name} {ours:.4f} >= champion v{champion.version}'s {theirs:.4f} - margin {cfg.margin}")
    return Decision(False, f"{name} {ours:.4f} < champion v{champion.version}'s {theirs:.4f} - margin {cfg.margin}")


Predict = Callable[[pd.DataFrame], pd.DataFrame]  # a pyfunc's predict: DataFrame(text) -> DataFrame(label, ...)


def score(version: str, predict: Predict, test: pd.DataFrame, classes: tuple[str, ...],
          latency_rows: int = LATENCY_ROWS) -> Scores:
    """Accuracy of a served model on ``test`` (text, label: an index into ``classes``, the prepared data's class
    names, which the model answers) and its single-text p50 latency."""
    out = predict(test[["text"]])
    if "label" not in out.columns or len(out) != len(test):
        raise DataError(f"version {version}: predictions need one 'label' row per text; got columns {list(out.columns)}")
    index = {name: i for i, name in enumerate(classes)}
    unknown = sorted(set(map(str, out["label"])) - set(index))
    if unknown:
        raise DataError(f"version {version} answers {unknown[:3]}, not classes of the prepared data {list(classes)}: it was "
                        "trained on other data; score it on its own dataset's test split or register a model of this one")
    labels = np.array([index[str(label)] for label in out["label"]], dtype=np.int64)
    quality = classification_metrics(test["label"].to_numpy(), np.eye(len(classes))[labels])
    seconds = []
    for text in test["text"].head(latency_rows):
        start = time.perf_counter()
        predict(pd.DataFrame({"text": [text]}))
        seconds.append(time.perf_counter() - start)
    return Scores(version, quality["accuracy"], percentiles_ms(seconds)["p50_ms"], quality["macro_f1"])


@contextlib.contextmanager
def registry_lock(root: Path) -> Iterator[None]:
    """An exclusive, blocking lock for read-decide-move sequences on the registry's aliases."""
    path = root / ".minibert" / "registry.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def promote(model_name: str, challenger_version: str | None, test: pd.DataFrame, classes: tuple[str, ...],
            cfg: PromoteParams, experiment: str, root: Path, context: dict[str, str] | None = None) -> Decision:
    """Score the challenger (default: the ``challenger`` alias) against the champion and move
    ``champion`` if ``decide`` says so; the decision is tagged and logged either way, with ``context``
    (the retrain flow's data change) beside it."""
    from pipeline import tracking

    tracking.configure(experiment, root)
    version = challenger_version or tracking.alias_version(model_name, CHALLENGER)
    if version is None:
        raise DataError(f"model {model_name!r} has no {CHALLENGER!r} alias; register one (dvc repro) or pass --version")
    with registry_lock(root):
        champion_version = tracking.alias_version(model_name, CHAMPION)
        challenger = score(version, tracking.served_predict(f"models:/{model_name}/{version}"), test, classes)
        champion = None if champion_version is None else score(
            champion_version, tracking.served_predict(f"models:/{model_name}/{champion_version}"), test, classes)
        decision = decide(challenger, champion, cfg)
        tags = {"promotion.decision": "promoted" if decision.promote else "refused", "promotion.reason": decision.reason,
                "promotion.accuracy": f"{challenger.accuracy:.4f}",
                "promotion.macro_f1": f"{challenger.macro_f1:.4f}", "promotion.metric": cfg.metric,
                "promotion.champion_version": champion_version or "", **(context or {})}
        if decision.promote:
            tags["previous_champion"] = champion_version or ""
            tracking.set_aliases(model_name, version, [CHAMPION])
        tracking.set_version_tags(model_name, version, tags)
    metrics = {"challenger_accuracy": challenger.accuracy, "challenger_macro_f1": challenger.macro_f1,
               "challenger_p50_ms": challenger.p50_ms, "promoted": float(decision.promote)}
    if champion is not None:
        metrics |= {"champion_accuracy": champion.accuracy, "champion_macro_f1": champion.macro_f1,
                    "champion_p50_ms": champion.p50_ms}
    tracking.record_run(experiment, "promote", {"model_name": model_name, "challenger_version": version,
                                                 "champion_version": champion_version or "none", "margin": cfg.margin,
                                                 "max_p50_ms": cfg.max_p50_ms}, metrics,
                        {"promotion.reason": decision.reason, **(context or {})})
    return decision


def promote_with_params(params: Params, data_dir: Path, version: str | None, root: Path,
                        context: dict[str, str] | None = None) -> Decision:
    """``promote`` as the CLI and the retrain flow run it: model, gate and experiment from params,
    scored on the task's test split of record under ``data_dir``."""
    test = load_split(data_dir, "test")
    return promote(params.register.model_name, version, test, prepared(data_dir).labels, params.promote,
                   params.tracking.experiment, root, context)


def rollback(model_name: str, experiment: str, root: Path) -> str:
    """Point ``champion`` back at the version it replaced; returns that version."""
    from pipeline import tracking

    tracking.configure(experiment, root)
    with registry_lock(root):
        current = tracking.alias_version(model_name, CHAMPION)
        if current is None:
            raise DataError(f"model {model_name!r} has no {CHAMPION!r} alias; nothing to roll back")
        previous = tracking.version_tags(model_name, current).get("previous_champion", "")
        if not previous:
            raise DataError(f"{model_name} v{current} records no previous champion (it was the first); nothing to roll back to")
        tracking.set_aliases(model_name, previous, [CHAMPION])
        tracking.set_version_tags(model_name, current, {"promotion.rolled_back_to": previous})
    tracking.record_run(experiment, "rollback", {"model_name": model_name, "from_version": current, "to_version": previous},
                        {"rolled_back": 1.0}, {})
    return previous
