"""The pipeline's wall clock: training budgets shrink together so a slow host still ends on time."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from minibert.validation import ConfigError
from pipeline.deadline import (
    ENV,
    FLOOR,
    PHASES,
    RESERVE,
    SHARE_BEFORE,
    Plan,
    allot,
    budget_s,
    pipeline_deadline,
    plan_for,
    read_plan,
    record_trained,
)
from pipeline.io import StageError
from pipeline.params import Params, load_params

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = {"pretrain": 300.0, "transfer": 420.0, "finetune": 360.0, "distill": 360.0}  # no cnn: a profile without it
SHARES = {"pretrain": 0.20, "transfer": 0.23, "finetune": 0.25, "cnn": 0.45, "distill": 0.83}


def plan(deadline: float = 1800.0, **changes: object) -> Plan:
    return dataclasses.replace(Plan(started=0.0, deadline=deadline, budgets=dict(BUDGETS), share_before=dict(SHARES),
                                    floor=0.25), **changes)


def simulate(untimed_total: float, cfg: Plan) -> tuple[float, dict[str, float]]:
    """A whole run on a host whose work outside the loops takes ``untimed_total`` seconds, spread as
    the shares say; every loop trains its full allotted budget. Returns (end time, scale a loop)."""
    now, trained, scales = 0.0, {}, {}
    done_share = 0.0
    for phase in [p for p in PHASES if p in cfg.budgets]:
        now += (cfg.share_before[phase] - done_share) * untimed_total
        done_share = cfg.share_before[phase]
        got = allot(dataclasses.replace(cfg, trained=dict(trained)), phase, cfg.budgets[phase], now)
        scales[phase] = got.scale
        trained[phase] = got.budget_s
        now += got.budget_s
    return now + (1.0 - done_share) * untimed_total, scales


def test_a_host_that_keeps_up_trains_every_planned_budget() -> None:
    end, scales = simulate(300.0, plan())  # 300 s outside the loops + 1440 s of budgets < 1800
    assert scales == dict.fromkeys(BUDGETS, 1.0)
    assert end == pytest.approx(1740.0)


@pytest.mark.parametrize("untimed", [400.0, 757.0, 1000.0])
def test_a_slow_host_shrinks_every_budget_by_one_factor_and_ends_on_the_deadline(untimed: float) -> None:
    end, scales = simulate(untimed, plan())
    assert end == pytest.approx(1800.0, abs=1e-6)
    expected = (1800.0 - untimed) / sum(BUDGETS.values())
    assert all(scale == pytest.approx(expected) for scale in scales.values()), scales


def test_a_slow_host_with_a_reserve_ends_that_long_before_the_deadline() -> None:
    end, scales = simulate(757.0, plan(reserve=18.0))
    assert end == pytest.approx(1800.0 - 18.0, abs=1e-6)
    assert all(scale == pytest.approx((1800.0 - 18.0 - 757.0) / sum(BUDGETS.values())) for scale in scales.values())
    assert simulate(300.0, plan(reserve=18.0))[1] == dict.fromkeys(BUDGETS, 1.0), "a host that keeps up loses nothing"


def test_a_deadline_that_cannot_be_met_leaves_each_loop_its_floor() -> None:
    got = allot(plan(deadline=100.0), "pretrain", 300.0, now=200.0)
    assert got.scale == 0.25 and got.budget_s == 75.0


def test_loops_already_trained_count_as_training_not_as_host_time() -> None:
    # 400 s in: pretrain trained 300 of them, so the host spent 100 s outside the loops (share 0.23)
    trained = allot(plan(trained={"pretrain": 300.0}), "transfer", 420.0, now=400.0)
    assert trained.untimed_s == 100.0
    assert trained.ahead_s == pytest.approx(100.0 * 0.77 / 0.23)
    assert trained.budget_s == pytest.approx(420.0 * (1800.0 - 400.0 - trained.ahead_s) / (420.0 + 360.0 + 360.0))
    assert 0.25 < trained.scale < 1.0
    untrained = allot(plan(), "transfer", 420.0, now=400.0)  # the same clock without the record reads as a slower host
    assert untrained.budget_s < trained.budget_s


def test_a_loop_the_profile_leaves_out_reserves_nothing() -> None:
    budgets = {k: v for k, v in BUDGETS.items() if k != "transfer"}
    with_transfer = allot(plan(deadline=1200.0), "pretrain", 300.0, now=100.0)
    without = allot(plan(deadline=1200.0, budgets=budgets), "pretrain", 300.0, now=100.0)
    assert with_transfer.scale == pytest.approx((1200.0 - 100.0 - 400.0) / 1440.0)
    assert without.scale == pytest.approx((1200.0 - 100.0 - 400.0) / (300.0 + 360.0 + 360.0))
    with pytest.raises(ValueError, match="unknown phase 'mlm'"):
        allot(plan(), "mlm", 300.0, now=0.0)


def test_the_plan_takes_the_budgets_and_shares_from_params() -> None:
    params = load_params(ROOT / "params.yaml")
    got = plan_for(params, started=1000.0, transfer=True)
    assert got is not None and got.deadline == 1000.0 + params.deadline.minutes * 60.0
    assert got.budgets == {"pretrain": params.pretrain.time_budget_min * 60.0,
                           "transfer": params.finetune.transfer.time_budget_min * 60.0,
                           "finetune": params.finetune.time_budget_min * 60.0,
                           "cnn": params.cnn.time_budget_min * 60.0,
                           "distill": params.distill.time_budget_min * params.distill.soup * 60.0}  # each soup member's cap
    assert params.distill.soup > 1, "the default distils a soup: its members' caps add up"
    assert got.share_before == SHARE_BEFORE and got.floor == FLOOR
    assert got.reserve == pytest.approx(RESERVE * params.deadline.minutes * 60.0) and 0 < RESERVE < 0.05
    assert "transfer" not in plan_for(params, 0.0, transfer=False).budgets  # the dataset names no intermediate task
    no_cnn = dataclasses.replace(params, distill=dataclasses.replace(  # a student_kind that needs no CNN
        params.distill, student_kind="transformer", soup=1), soft_targets=dataclasses.replace(
        params.soft_targets, shares=dataclasses.replace(params.soft_targets.shares, teacher=0.667, word_cnn=0.0)))
    assert "cnn" not in plan_for(no_cnn, 0.0, True).budgets  # its stage trains nothing: no time reserved for it
    assert plan_for(no_cnn, 0.0, True).budgets["distill"] == params.distill.time_budget_min * 60.0
    off = dataclasses.replace(params, deadline=dataclasses.replace(params.deadline, minutes=None))
    assert plan_for(off, 0.0, True) is None


def test_without_a_plan_every_loop_gets_its_planned_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert budget_s("pretrain", 5.0) == (300.0, {"time_budget_s": 300.0})
    assert budget_s("pretrain", None) == (None, {})
    record_trained("pretrain", 1.0)  # no plan: nothing to write, no error


def test_stages_read_the_plan_and_record_what_they_trained(monkeypatch: pytest.MonkeyPatch) -> None:
    params = load_params(ROOT / "params.yaml")
    monkeypatch.delenv(ENV, raising=False)
    with pipeline_deadline(params, started=0.0, transfer=True) as opened:  # started in 1970: far behind
        path = Path(os.environ[ENV])
        assert read_plan(path) == opened
        budget, metrics = budget_s("finetune", 6.0)
        assert budget == 90.0 and metrics["deadline_scale"] == 0.25 and metrics["time_budget_s"] == 90.0
        assert budget_s(None, 6.0) == (360.0, {"time_budget_s": 360.0}), "a loop outside the plan keeps its budget"
        record_trained("pretrain", 12.5)
        record_trained("finetune", 3.0)
        assert read_plan(path).trained == {"pretrain": 12.5, "finetune": 3.0}
        assert [p.name for p in path.parent.iterdir()] == ["plan.json"], "written atomically, no temp left"
    assert ENV not in os.environ and not path.exists()


def test_a_retried_run_keeps_its_plan_and_a_null_deadline_hides_any(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = load_params(ROOT / "params.yaml")
    monkeypatch.delenv(ENV, raising=False)
    with pipeline_deadline(params, started=5.0, transfer=True):
        outer = Path(os.environ[ENV])
        record_trained("pretrain", 100.0)
        with pipeline_deadline(params, started=5.0, transfer=True) as retried:  # Prefect's retry of the repro task
            assert os.environ[ENV] == str(outer) and retried.trained == {"pretrain": 100.0}
        assert outer.exists(), "the retry leaves the run's plan to the run"
        with pipeline_deadline(params, started=6.0, transfer=True) as other:  # another run: a plan of its own
            assert os.environ[ENV] != str(outer) and other.trained == {}
        assert os.environ[ENV] == str(outer), "restored"
        off = dataclasses.replace(params, deadline=dataclasses.replace(params.deadline, minutes=None))
        with pipeline_deadline(off, started=5.0, transfer=True) as none:
            assert none is None and ENV not in os.environ
            assert budget_s("pretrain", 5.0) == (300.0, {"time_budget_s": 300.0})
        assert os.environ[ENV] == str(outer)
    assert ENV not in os.environ


@pytest.mark.parametrize("broken", [
    "{",  # not JSON
    json.dumps({"started": 0.0}),  # keys missing
    json.dumps({**dataclasses.asdict(plan()), "share_before": {}}),  # no shares
    json.dumps({**dataclasses.asdict(plan()), "budgets": {"pretrain": "five minutes"}}),
    json.dumps({**dataclasses.asdict(plan()), "reserve": "18 s"}),
])
def test_a_broken_plan_file_names_the_variable(broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text(broken)
    monkeypatch.setenv(ENV, str(bad))
    with pytest.raises(StageError, match=f"{re.escape(str(bad))}.*{ENV}"):
        budget_s("pretrain", 5.0)


def test_the_deadline_section_is_checked() -> None:
    defaults = Params()
    assert defaults.deadline.minutes == 30.0
    from minibert.validation import from_dict

    for bad in ({"minutes": 0}, {"minutes": -5}):
        with pytest.raises(ConfigError, match=f"deadline.{next(iter(bad))}"):
            from_dict(Params, {"deadline": bad})
    for fixed in ({"untimed_share_before": {"finetune": 0.1}}, {"floor": 0.5}):  # measured or fixed, not settings
        with pytest.raises(ConfigError, match=f"deadline.{next(iter(fixed))}"):
            from_dict(Params, {"deadline": fixed})
    assert 0 < FLOOR <= 1
    assert all(0 < SHARE_BEFORE[p] < 1 for p in PHASES) and list(SHARE_BEFORE.values()) == sorted(SHARE_BEFORE.values())
