"""The whole pipeline's wall clock: `minibert pipeline` and the Prefect flow give a run a deadline
(params ``deadline.minutes``), and each training loop that has a time budget (pretraining, the
fine-tuning transfer phase, fine-tuning, the word-CNN, distillation) asks here for its budget when it starts.

On a host that keeps up, a loop gets its planned budget. On one that runs behind (a CPU without
AVX512-BF16 trains in fp32, and is slower at the work outside the loops too), the loop's budget
and every later one shrink by one factor, so the run ends when the deadline comes:

    untimed  = (now - started) - seconds the loops of this run trained so far
    ahead    = untimed * (1 - share) / share       # the untimed work still to come, estimated
    scale    = (deadline - reserve - now - ahead) / (this loop's and later loops' planned budgets)

``share`` (``SHARE_BEFORE``) is the part of the work outside the training loops (data, tokenizer,
PPMI vectors, scoring, export, evaluation, DVC and MLflow) done before the loop starts: stable
across hosts (measured on the default pipeline, ``benchmarks/JOURNAL.md``), so the work done so far
measures the host. ``reserve`` (``RESERVE`` of the run's span) covers the spread of that share between
runs. The scale stays within [floor, 1]: a budget never grows, and a deadline that cannot be met still
leaves each loop ``floor`` of its budget.

The plan travels as a JSON file named by ``MINIBERT_DEADLINE_FILE`` (the stages are ``dvc repro``'s
subprocesses); each loop adds the seconds it trained. Without the variable (plain ``dvc repro``, a
benchmark) every loop gets its planned budget. Skipped (up-to-date) stages do no work, so a partial
rerun reads as a host ahead of schedule: the deadline there is a cap, not a promise. A retry of
the same run (Prefect's) reuses the plan it opened, with the loops already trained in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from pipeline.io import StageError, atomic_path
from pipeline.params import DeadlineParams, Params

ENV = "MINIBERT_DEADLINE_FILE"
PHASES = ("pretrain", "transfer", "finetune", "cnn", "distill")  # the budgeted loops, in pipeline order
# Of the work outside the loops, the part done before each loop starts: the default pipeline's, measured
# over its runs on three CPU kinds (benchmarks/JOURNAL.md); not a setting. The last loop's sets how close the
# run ends to its deadline: the least measured (a share too high underestimates the work still to come).
SHARE_BEFORE = {"pretrain": 0.19, "transfer": 0.22, "finetune": 0.24, "cnn": 0.74, "distill": 0.85}
FLOOR = 0.25  # the least share of its planned budget a training loop keeps, however late the run
# Of the run's span, the part the plan aims to end before the deadline: the measured spread of the last loop's share
# (0.848-0.863, benchmarks/JOURNAL.md) moves the end by up to 2 s late and 11 s early at the default's 30 minutes,
# and runs at the least share ended 0-1 s inside; 1 % (18 s there) keeps the promise with that spread to spare.
RESERVE = 0.01


@dataclass(frozen=True)
class Plan:
    started: float  # Unix time the pipeline started
    deadline: float  # Unix time it should end by
    budgets: dict[str, float]  # planned seconds of each budgeted loop (loops without a budget absent)
    share_before: dict[str, float]  # of the work outside the loops, the part done before each loop starts
    floor: float  # the least share of its planned budget a loop keeps
    trained: dict[str, float] = field(default_factory=dict)  # seconds each finished loop trained
    reserve: float = 0.0  # seconds before the deadline the plan aims to end by


@dataclass(frozen=True)
class Allotment:
    budget_s: float
    scale: float  # budget_s / planned
    untimed_s: float  # work outside the loops so far
    ahead_s: float  # estimated work outside the loops still to come


def allot(plan: Plan, phase: str, planned_s: float, now: float) -> Allotment:
    """``phase``'s budget at ``now``: ``planned_s`` scaled with the later loops' budgets to fit the deadline."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
    share = plan.share_before[phase]
    untimed = max(now - plan.started - sum(plan.trained.values()), 0.0)
    ahead = untimed * (1.0 - share) / share
    later = [p for p in PHASES[PHASES.index(phase) + 1:] if p in plan.budgets and p not in plan.trained]
    planned_left = planned_s + sum(plan.budgets[p] for p in later)
    aim = plan.deadline - plan.reserve
    scale = min(1.0, max(plan.floor, (aim - now - ahead) / planned_left)) if planned_left > 0 else 1.0
    return Allotment(planned_s * scale, scale, untimed, ahead)


def plan_for(params: Params, started: float, transfer: bool) -> Plan | None:
    """The plan of a run on ``params`` started at ``started`` (Unix time); None when the deadline is off.
    ``transfer``: the task's dataset names an intermediate task, so the teacher's transfer phase runs."""
    cfg: DeadlineParams = params.deadline
    if cfg.minutes is None:
        return None
    minutes = {"pretrain": params.pretrain.time_budget_min, "finetune": params.finetune.time_budget_min,
               "distill": None if params.distill.time_budget_min is None else params.distill.time_budget_min * params.distill.soup,
               "cnn": params.cnn.time_budget_min if params.soft_targets.shares.word_cnn > 0 else None,
               "transfer": params.finetune.transfer.time_budget_min if transfer else None}
    return Plan(started=started, deadline=started + cfg.minutes * 60.0,
                budgets={p: minutes[p] * 60.0 for p in PHASES if minutes[p] is not None},
                share_before=dict(SHARE_BEFORE), floor=FLOOR, reserve=RESERVE * cfg.minutes * 60.0)


def read_plan(path: Path) -> Plan:
    try:
        plan = Plan(**json.loads(path.read_text()))
        numbers = [plan.started, plan.deadline, plan.floor, plan.reserve, *plan.budgets.values(), *plan.trained.values()]
        if not all(isinstance(v, (int, float)) for v in numbers):
            raise TypeError("a time, budget, floor or reserve is not a number")
        shares = [plan.share_before.get(p) for p in PHASES]
        if not all(isinstance(v, (int, float)) and 0 < v < 1 for v in shares):
            raise ValueError(f"share_before needs each of {PHASES} in (0, 1), got {plan.share_before}")
        return plan
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise StageError(f"{path} (named by {ENV}): not a deadline plan ({err}); unset {ENV} to train on the "
                         "planned budgets") from None


def write_plan(plan: Plan, path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(asdict(plan), indent=1))


def budget_s(phase: str | None, planned_min: float | None) -> tuple[float | None, dict[str, float]]:
    """A loop's time budget in seconds (None: none) and the metrics that say how it was set: the
    planned one, shrunk to the pipeline's deadline when ``MINIBERT_DEADLINE_FILE`` names a plan
    (and ``phase``, one of ``PHASES``, says which loop this is; None: a loop outside the plan)."""
    if planned_min is None:
        return None, {}
    planned = planned_min * 60.0
    path = os.environ.get(ENV)
    if not path or phase is None:
        return planned, {"time_budget_s": planned}
    got = allot(read_plan(Path(path)), phase, planned, time.time())
    return got.budget_s, {"time_budget_s": got.budget_s, "deadline_scale": got.scale,
                          "deadline_untimed_s": got.untimed_s, "deadline_ahead_s": got.ahead_s}


def record_trained(phase: str | None, seconds: float) -> None:
    """Add a finished loop's training seconds to the plan (no-op without one, or for ``phase`` None)."""
    path = os.environ.get(ENV)
    if path and phase is not None:
        plan = read_plan(Path(path))
        write_plan(replace(plan, trained={**plan.trained, phase: seconds}), Path(path))


def verdict(params: Params, seconds: float) -> str | None:
    """The run summary's line on the deadline (None when it is off)."""
    minutes = params.deadline.minutes
    if minutes is None:
        return None
    limit = minutes * 60.0
    return f"deadline {minutes:g} min: {'met' if seconds <= limit else 'missed'} by {abs(limit - seconds):.0f} s"


@contextlib.contextmanager
def pipeline_deadline(params: Params, started: float, transfer: bool) -> Iterator[Plan | None]:
    """While open, the stages started from this process see the run's plan (a temp file via ``ENV``;
    with ``deadline.minutes`` null, no plan at all, whatever the environment held). A plan already
    open for the same ``started`` (the run being retried) is kept, with what it recorded."""
    plan, previous = plan_for(params, started, transfer), os.environ.get(ENV)
    if plan is not None and previous and Path(previous).is_file():
        open_plan = read_plan(Path(previous))
        if open_plan.started == started:
            yield open_plan
            return
    try:
        if plan is None:
            os.environ.pop(ENV, None)
            yield None
            return
        with tempfile.TemporaryDirectory(prefix="minibert-deadline-") as tmp:
            path = Path(tmp) / "plan.json"
            write_plan(plan, path)
            os.environ[ENV] = str(path)
            yield plan
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
