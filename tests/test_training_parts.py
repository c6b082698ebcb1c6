"""Masking, batching, losses, schedules and the training loop: the maths the stages stand on."""

import dataclasses
import math
import os
import sys
import time
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minibert import precision
from minibert.batching import EpochStream, bucketed_batches, pad_batch, sorted_batches
from minibert.losses import kd_loss, mlm_loss
from minibert.masking import IGNORE_INDEX, mask_tokens
from minibert.precision import cpu_has_native_bf16
from minibert.train_config import LoopConfig, OptimConfig
from minibert.trainer import (
    Checkpointer,
    Hooks,
    RecordingTracker,
    build_optimizer,
    build_scheduler,
    estimate_eval_seconds,
    fit,
    lr_factor,
    min_warmup_steps,
)
from minibert.validation import ConfigError


def test_mask_tokens_follows_80_10_10_and_spares_specials() -> None:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (1000, 128))  # ~19k selected: 80/10/10 shares within ~1 %
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    maskable = ids >= 5
    masked, labels = mask_tokens(ids, maskable, mask_id=4, first_regular_id=5, vocab_size=1000, probability=0.15, generator=gen)
    selected = labels != IGNORE_INDEX
    assert abs(selected.float().mean().item() - 0.15 * 126 / 128) < 0.003
    assert not selected[:, 0].any() and not selected[:, -1].any()
    torch.testing.assert_close(labels[selected], ids[selected])
    as_mask = (masked[selected] == 4).float().mean().item()
    kept = (masked[selected] == ids[selected]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.012
    assert abs(kept - 0.1) < 0.012  # a random replacement can equal the original (1/995)
    assert torch.equal(masked[~selected], ids[~selected])
    assert masked[selected].min() >= 4


def test_mask_tokens_is_reproducible_with_a_generator() -> None:
    ids = torch.randint(5, 100, (4, 16))
    a = mask_tokens(ids, ids >= 5, 4, 5, 100, 0.3, torch.Generator().manual_seed(1))
    b = mask_tokens(ids, ids >= 5, 4, 5, 100, 0.3, torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="mlm probability must be in"):
        mask_tokens(ids, ids >= 5, 4, 5, 100, 0.0)


def test_bucketed_batches_cover_everything_once_and_cut_padding() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 120, size=1000)
    batches = bucketed_batches(lengths, 16, np.random.default_rng(1))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))

    def padding(bs: list[np.ndarray]) -> int:
        return sum(int(lengths[b].max() * len(b) - lengths[b].sum()) for b in bs)

    random_batches = np.array_split(np.random.default_rng(1).permutation(1000), 1000 // 16)
    assert padding(batches) < 0.2 * padding(random_batches)
    assert [len(b) for b in sorted_batches(lengths, 300)] == [300, 300, 300, 100]


def test_pad_batch_pads_right_with_a_mask() -> None:
    ids, mask = pad_batch([[2, 9, 3], [2, 3]], pad_id=0)
    assert ids.tolist() == [[2, 9, 3], [2, 3, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_kd_loss_equals_the_hand_formula() -> None:
    s, t = torch.randn(6, 2), torch.randn(6, 2)
    y = torch.tensor([0, 1, 1, 0, 1, 0])
    temp, alpha = 3.0, 0.7
    p_t = torch.softmax(t / temp, -1)
    kl = (p_t * (p_t.log() - torch.log_softmax(s / temp, -1))).sum(-1).mean()
    expected = alpha * temp**2 * kl + (1 - alpha) * F.cross_entropy(s, y)
    torch.testing.assert_close(kd_loss(s, t, y, temp, alpha), expected)
    torch.testing.assert_close(kd_loss(s, t, y, temp, 0.0), F.cross_entropy(s, y))
    assert kd_loss(t, t, y, temp, 1.0).abs() < 1e-6
    with pytest.raises(ValueError, match="temperature > 0"):
        kd_loss(s, t, y, 0.0, 0.5)


def test_mlm_loss_ignores_unselected_positions() -> None:
    logits = torch.randn(2, 3, 7)
    labels = torch.tensor([[IGNORE_INDEX, 4, IGNORE_INDEX], [1, IGNORE_INDEX, IGNORE_INDEX]])
    expected = F.cross_entropy(torch.stack([logits[0, 1], logits[1, 0]]), torch.tensor([4, 1]))
    torch.testing.assert_close(mlm_loss(logits, labels), expected)


def test_mlm_loss_of_a_batch_with_no_masked_token_is_zero_with_zero_gradients() -> None:
    """An epoch's last few short sentences can draw no masked token (on the GPU profile's corpus, a
    7-row batch of 3-token sequences did): the loss is 0, not NaN, and the step changes nothing."""
    dense = torch.randn(2, 3, 7, requires_grad=True)
    loss = mlm_loss(dense, torch.full((2, 3), IGNORE_INDEX))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(dense.grad, torch.zeros_like(dense))
    sparse = torch.randn(0, 7, requires_grad=True)  # the sparse head's logits at no positions
    assert mlm_loss(sparse, torch.zeros(0, dtype=torch.long)).item() == 0.0


def test_optimizer_groups_leave_biases_and_norms_undecayed() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    opt = build_optimizer(model, OptimConfig(weight_decay=0.1))
    decayed, undecayed = opt.param_groups
    assert [p.shape for p in decayed["params"]] == [torch.Size([4, 4])]
    assert len(undecayed["params"]) == 3 and undecayed["weight_decay"] == 0.0


@pytest.mark.parametrize("schedule, last", [("linear", 0.0), ("cosine", 0.0), ("constant", 1.0)])
def test_schedule_warms_up_then_decays(schedule: str, last: float) -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=1.0)
    sched = build_scheduler(opt, OptimConfig(lr=1.0, warmup_ratio=0.1, schedule=schedule), max_steps=100)
    lrs = []
    for _ in range(100):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs[0] < 0.1 and math.isclose(lrs[10], 1.0, rel_tol=1e-6)
    assert all(a <= b + 1e-9 for a, b in zip(lrs[:10], lrs[1:11])), "warmup rises"
    assert math.isclose(sched.get_last_lr()[0], last, abs_tol=1e-6)


def _lrs(sched: torch.optim.lr_scheduler.LRScheduler, steps: int, before_step=lambda step: None) -> list[float]:
    """The LR each of ``steps`` optimizer steps runs at."""
    lrs = []
    for step in range(steps):
        before_step(step)
        lrs.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    return lrs


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
@pytest.mark.parametrize("warmup_ratio, max_steps", [(0.0, 1), (0.0, 23), (0.1, 10), (0.1, 100), (0.3, 37)])
def test_the_closed_form_schedule_is_torchs_step_schedule(schedule: str, warmup_ratio: float, max_steps: int) -> None:
    """lr_factor (what the budget clock evaluates at fractional steps) against torch's
    LinearLR / CosineAnnealingLR / SequentialLR, step by step."""
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    torch_lrs = _lrs(build_scheduler(opt, OptimConfig(lr=1.0, warmup_ratio=warmup_ratio, schedule=schedule), max_steps), max_steps)
    warmup = math.ceil(warmup_ratio * max_steps)
    np.testing.assert_allclose(torch_lrs, [lr_factor(schedule, warmup, max_steps, s) for s in range(max_steps)], atol=1e-9)


def test_the_budget_clock_follows_whichever_progress_leads() -> None:
    """Steps ahead of time: the step schedule. Time ahead of steps: the schedule at the time's
    step, so warmup and decay end when the budget does; the clock never runs the schedule backwards."""
    clock = {"progress": 0.0}
    cfg = OptimConfig(lr=1.0, warmup_ratio=0.1, schedule="linear", schedule_clock="budget")
    steps_cfg = OptimConfig(lr=1.0, warmup_ratio=0.1, schedule="linear")

    def sched(c: OptimConfig, progress=lambda: clock["progress"]):
        return build_scheduler(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0), c, 100, progress)

    step_lrs = _lrs(sched(steps_cfg, None), 100)
    np.testing.assert_allclose(_lrs(sched(cfg), 100), step_lrs, atol=1e-12)  # time stands still
    budget_lrs = _lrs(sched(cfg), 50, lambda step: clock.update(progress=(step + 1) / 50))  # time runs 2x the steps
    by_time = [lr_factor("linear", 10, 100, 2 * s) for s in range(50)]
    ramp = [(1 + s) / 11 if s < 10 else 1.0 for s in range(50)]  # warmup keeps its 10 steps (min_warmup_steps)
    np.testing.assert_allclose(budget_lrs, np.minimum(by_time, ramp), atol=1e-9)
    assert by_time[5] == pytest.approx(1.0) and budget_lrs[5] == pytest.approx(6 / 11)  # time alone would end warmup at step 5
    assert budget_lrs[10] == pytest.approx(1 - 10 / 90)  # past warmup the decay follows the time
    assert budget_lrs[-1] < 0.025  # the last step runs at 2 / 90 of the peak: the step of time 49 / 50
    clock["progress"] = 0.5  # the step clock, and a loop without a time budget, ignore the time
    np.testing.assert_allclose(_lrs(sched(steps_cfg), 100), step_lrs, atol=1e-12)
    np.testing.assert_allclose(_lrs(sched(cfg, None), 100), step_lrs, atol=1e-12)


def test_a_budget_clock_warmup_takes_at_least_adams_untuned_warmup_steps() -> None:
    """A loose max_steps (the budget stops the loop) and slow first steps: time alone would end the
    6 % warmup within 12 steps; it takes 2 / (1 - beta2) = 100 (beta2 0.98), then the time leads."""
    cfg = OptimConfig(lr=1.0, warmup_ratio=0.06, schedule="linear", schedule_clock="budget", betas=(0.9, 0.98))
    assert min_warmup_steps(cfg, 6000) == 100 and min_warmup_steps(cfg, 40) == 40
    assert min_warmup_steps(dataclasses.replace(cfg, betas=(0.9, 0.999)), 6000) == 2000
    clock = {"progress": 0.0}
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, cfg, 100_000, lambda: clock["progress"])
    lrs = _lrs(sched, 200, lambda step: clock.update(progress=step / 200))  # each step 0.5 % of the budget
    # step s's LR is set after step s - 1, when the clock reads (s - 1) / 200
    by_time = [lr_factor("linear", 6000, 100_000, max(s, 100_000 * max(s - 1, 0) / 200)) for s in range(200)]
    ramp = [(1 + s) / 101 if s < 100 else 1.0 for s in range(200)]
    np.testing.assert_allclose(lrs, np.minimum(by_time, ramp), atol=1e-9)  # the slower of the two in warmup, then the time
    assert by_time[13] == 1.0 and lrs[13] == pytest.approx(14 / 101)  # time alone: the peak by step 13; the ramp holds it back
    assert lrs[100] == pytest.approx(by_time[100]) and lrs[100] < lrs[99]  # from step 100 the time's decay


def test_optim_config_validates() -> None:
    with pytest.raises(ConfigError, match=r"schedule: 'step' is not one of \['linear', 'cosine', 'constant'\]"):
        OptimConfig(schedule="step")
    with pytest.raises(ConfigError, match="warmup_ratio"):
        OptimConfig(warmup_ratio=1.0)
    with pytest.raises(ConfigError, match=r"schedule_clock: 'time' is not one of \['steps', 'budget'\]"):
        OptimConfig(schedule_clock="time")


def _toy_stream(w: torch.Tensor):
    """A learnable regression unit test: y = x w (synthetic on purpose, not training data)."""
    gen = torch.Generator().manual_seed(0)
    while True:
        x = torch.randn(32, 4, generator=gen)
        yield x, x @ w


def test_fit_reduces_loss_logs_and_evaluates() -> None:
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    model = torch.nn.Linear(4, 1)
    tracker = RecordingTracker()

    def step(m, batch):
        x, y = batch
        return F.mse_loss(m(x), y), len(x)

    result = fit(model, _toy_stream(w), step, OptimConfig(lr=0.05, warmup_ratio=0.0, schedule="constant"),
                 LoopConfig(max_steps=200, log_every=50, eval_every=100), tracker,
                 Hooks(evaluate=lambda m: {"w_error": float((m.weight.T - w).abs().max())}))
    losses = [v for _, v in tracker.series("train_loss")]
    assert len(losses) == 4 and losses[-1] < 0.01 * losses[0]
    assert [s for s, _ in result.evals] == [100, 200]
    assert result.evals[-1][1]["w_error"] < 0.05 and result.stopped_by == "max_steps"


def test_fit_reads_values_back_only_when_it_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU every read of a device value (float(), .item(), int()) waits for the queued work:
    fit keeps loss, token count and gradient norm as tensors and reads them at log steps only.
    Counted: reads made by the training loop's own code (AdamW's CPU step counter is not a device
    value, and the fused GPU AdamW keeps it on the device)."""
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    reads = {"n": 0}
    for name in ("__float__", "__int__", "__bool__", "item"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original):
            reads["n"] += sys._getframe(1).f_code.co_filename.endswith(os.path.join("minibert", "trainer.py"))
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    shown: list[float] = []

    def step(m, batch):
        x, y = batch
        return F.mse_loss(m(x), y), torch.tensor(len(x))

    tracker = RecordingTracker()
    result = fit(torch.nn.Linear(4, 1), _toy_stream(w), step, OptimConfig(lr=0.05, warmup_ratio=0.0, schedule="constant"),
                 LoopConfig(max_steps=200, log_every=50), tracker, Hooks(progress=lambda s, loss: shown.append(loss)))
    monkeypatch.undo()
    assert result.steps == 200 and reads["n"] <= 4 * 4 + 2  # 4 log steps x (loss, tokens, grad norm, slack) + the end
    assert len(shown) == 200 and math.isnan(shown[0]) and shown[-1] == tracker.series("train_loss")[-1][1]
    assert shown[49] == tracker.series("train_loss")[0][1]  # the bar shows the last logged window mean
    assert tracker.series("tokens_per_s")[0][1] > 0 and math.isfinite(result.last_loss)
    elapsed = [t for _, t in tracker.series("elapsed_s")]  # the curves' time axis: one a log step, rising, within the run
    assert len(elapsed) == 4 and all(0 < a < b for a, b in zip(elapsed, elapsed[1:])) and elapsed[-1] <= result.seconds


def _slow_step(m: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, int]:
    """A 20-ms training step on the toy regression: loops whose time budget is what stops them."""
    time.sleep(0.02)
    x, y = batch
    return F.mse_loss(m(x), y), len(x)


def _slow_eval(m: torch.nn.Module) -> dict[str, float]:
    """A 600-ms evaluation."""
    time.sleep(0.6)
    return {"score": 1.0}


def test_fit_stops_when_the_time_budget_is_spent() -> None:
    model = torch.nn.Linear(4, 1)

    result = fit(model, _toy_stream(torch.ones(4, 1)), _slow_step, OptimConfig(), LoopConfig(max_steps=10_000, time_budget_s=0.2),
                 RecordingTracker())
    assert result.stopped_by == "time_budget" and 3 <= result.steps < 20


def test_the_time_budget_keeps_back_the_final_evaluation() -> None:
    """Steps of 20 ms, evaluations of 600 ms every 30 steps, a 2-s budget: the loop stops at about
    1.4 s, so its final evaluation ends within the budget (before: the steps ran to 1.8 s and the
    second evaluation ended at 2.4 s)."""
    model = torch.nn.Linear(4, 1)

    result = fit(model, _toy_stream(torch.ones(4, 1)), _slow_step, OptimConfig(),
                 LoopConfig(max_steps=10_000, time_budget_s=2.0, eval_every=30), RecordingTracker(), Hooks(evaluate=_slow_eval))
    assert result.stopped_by == "time_budget" and result.evals[-1][0] == result.steps > 30
    assert result.seconds <= 2.25, f"the loop took {result.seconds:.2f} s of a 2-s budget"


def test_before_any_evaluation_the_kept_back_time_is_estimated_from_its_tokens() -> None:
    """No periodic evaluation: the final one (600 ms, over 2,880 tokens) is estimated at the training
    throughput (32 tokens a 20-ms step: a forward pass over 2,880 tokens ~ 0.6 s), so the loop stops
    at about 1.4 s of its 2-s budget; without the estimate it ends at 2.6 s."""
    model = torch.nn.Linear(4, 1)

    result = fit(model, _toy_stream(torch.ones(4, 1)), _slow_step, OptimConfig(),
                 LoopConfig(max_steps=10_000, time_budget_s=2.0, log_every=5), RecordingTracker(),
                 Hooks(evaluate=_slow_eval, evaluate_tokens=2880))
    assert result.stopped_by == "time_budget" and [at for at, _ in result.evals] == [result.steps]
    assert result.seconds <= 2.25, f"the loop took {result.seconds:.2f} s of a 2-s budget"
    assert estimate_eval_seconds(2880, 32 * 5, 0.1) == pytest.approx(0.6)
    assert estimate_eval_seconds(2880, 0, 0.0) == 0.0


@pytest.mark.parametrize("clock", ["steps", "budget"])
def test_a_budget_clock_ends_the_decay_when_the_time_budget_stops_the_loop(clock: str) -> None:
    """10,000 planned steps, a budget that allows ~15: the step clock stops at the peak LR, the
    budget clock has decayed it to about one step's share of the budget."""
    model = torch.nn.Linear(4, 1)

    tracker = RecordingTracker()
    result = fit(model, _toy_stream(torch.ones(4, 1)), _slow_step,
                 OptimConfig(lr=1e-3, warmup_ratio=0.0, schedule_clock=clock),
                 LoopConfig(max_steps=10_000, time_budget_s=0.3, log_every=1), tracker)
    lrs = [lr for _, lr in tracker.series("lr")]
    assert result.stopped_by == "time_budget" and len(lrs) == result.steps >= 5
    if clock == "steps":
        assert min(lrs) > 0.99e-3
    else:
        assert all(a > b for a, b in zip(lrs, lrs[1:])) and lrs[-1] < 0.3e-3


def _regression_stream(seed: int = 0) -> EpochStream:
    """A resumable stream over a fixed toy regression set (unit-test data, not training data)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(96, 4, generator=gen)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(96, 1, generator=gen)

    def make(index: np.ndarray, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        noise = 0.01 * torch.randn(len(index), 1, generator=g)  # exercises the stream's RNG state
        return x[index], y[index] + noise

    return EpochStream(np.full(96, 4), 8, seed, make)


def _mse_step(m: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, int]:
    x, y = batch
    return F.mse_loss(m(torch.nn.functional.dropout(x, 0.1, training=m.training)), y), len(x)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
def test_a_killed_run_resumes_to_the_same_weights(tmp_path, device: str) -> None:
    """Also on a GPU, where dropout draws from the device's own generator."""
    optim, loop = OptimConfig(lr=0.02), LoopConfig(max_steps=30, log_every=5, checkpoint_every=10)
    torch.manual_seed(0)
    reference = torch.nn.Linear(4, 1).to(device)
    full_curve = RecordingTracker()
    fit(reference, _regression_stream(), _mse_step, optim, loop, full_curve)

    class Killed(Exception):
        pass

    def kill_at_25(step: int) -> None:
        if step == 25:
            raise Killed

    torch.manual_seed(0)
    checkpointer = Checkpointer(tmp_path / "resume.pt", fingerprint="run-a")
    with pytest.raises(Killed):
        fit(torch.nn.Linear(4, 1).to(device), _regression_stream(), _mse_step, optim, loop, RecordingTracker(),
            Hooks(before_step=kill_at_25), checkpointer)
    assert checkpointer.path.is_file()
    torch.manual_seed(123)  # a new process: different RNG until the checkpoint restores it
    resumed = torch.nn.Linear(4, 1).to(device)
    resumed_curve = RecordingTracker()
    result = fit(resumed, _regression_stream(), _mse_step, optim, loop, resumed_curve, checkpointer=checkpointer)
    assert result.resumed_from == 20 and result.steps == 30
    assert 0.0 < result.seconds_before_resume < result.seconds, "the killed run's seconds count, and are told apart"
    assert [s for s, _ in resumed_curve.series("train_loss")] == [5, 10, 15, 20, 25, 30], "the killed run's logs are replayed"
    assert resumed_curve.series("lr") == full_curve.series("lr")
    for (_, got), (_, want) in zip(resumed_curve.series("train_loss"), full_curve.series("train_loss"), strict=True):
        assert got == pytest.approx(want, rel=1e-6)
    torch.testing.assert_close(resumed.weight, reference.weight, atol=0, rtol=0)
    assert not checkpointer.path.exists(), "a completed run removes its checkpoint"
    stale = Checkpointer(tmp_path / "resume.pt", fingerprint="run-b")
    checkpointer.save({"step": 5})
    assert stale.load() is None, "a checkpoint of other params or data is never resumed"


def test_gradient_accumulation_matches_one_large_batch() -> None:
    x = torch.randn(16, 4)
    y = x.sum(1, keepdim=True)

    def stream(size: int):
        while True:
            for i in range(0, 16, size):
                yield x[i : i + size], y[i : i + size]

    step = lambda m, b: (F.mse_loss(m(b[0]), b[1]), len(b[0]))  # noqa: E731
    cfg = OptimConfig(lr=0.1, warmup_ratio=0.0, schedule="constant", grad_clip=0.0)
    torch.manual_seed(0)
    big = torch.nn.Linear(4, 1)
    torch.manual_seed(0)
    small = torch.nn.Linear(4, 1)
    fit(big, stream(16), step, cfg, LoopConfig(max_steps=5), RecordingTracker())
    fit(small, stream(4), step, cfg, LoopConfig(max_steps=5, accumulate=4), RecordingTracker())
    torch.testing.assert_close(small.weight, big.weight, atol=1e-6, rtol=1e-5)


def test_lr_scale_makes_groups_with_their_own_learning_rate() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = build_optimizer(model, OptimConfig(lr=1.0), lr_scale=lambda name: 0.5 if name.startswith("0.") else 1.0)
    rates = sorted((g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups)
    assert rates == [(0.5, 0.0, 1), (0.5, 0.01, 1), (1.0, 0.0, 1), (1.0, 0.01, 1)]


def test_bf16_autocast_trains() -> None:
    model = torch.nn.Linear(4, 1)
    tracker = RecordingTracker()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit(model, _toy_stream(torch.ones(4, 1)), lambda m, b: (F.mse_loss(m(b[0]).float(), b[1]), 1),
                     OptimConfig(lr=0.05, warmup_ratio=0.0), LoopConfig(max_steps=60, log_every=20, precision="bf16"),
                     tracker)
    losses = [v for _, v in tracker.series("train_loss")]
    assert losses[-1] < 0.2 * losses[0]
    assert result.precision == "bf16"  # an explicit bf16 is honoured even where it is emulated...
    emulated = [w for w in caught if "without native bf16" in str(w.message)]
    assert len(emulated) == (0 if cpu_has_native_bf16() else 1)  # ...with a warning there
    with pytest.raises(ConfigError, match=r"precision: 'fp8' is not one of \['fp32', 'bf16', 'auto'\]"):
        LoopConfig(max_steps=1, precision="fp8")


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_follows_the_hardware(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """``auto`` runs bf16 autocast only where the CPU has it natively; fit reports what it used."""
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    seen: list[torch.dtype] = []

    def loss(m: torch.nn.Module, b: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, int]:
        out = m(b[0])
        seen.append(out.dtype)
        return F.mse_loss(out.float(), b[1]), 1

    result = fit(torch.nn.Linear(4, 1), _toy_stream(torch.ones(4, 1)), loss, OptimConfig(lr=0.05, warmup_ratio=0.0),
                 LoopConfig(max_steps=3, log_every=1, precision="auto"), RecordingTracker())
    assert result.precision == ("bf16" if native else "fp32")
    assert set(seen) == {torch.bfloat16 if native else torch.float32}


def test_resolve_precision() -> None:
    cpu = torch.device("cpu")
    assert precision.resolve_precision("fp32", cpu, native=True) == "fp32"
    assert precision.resolve_precision("auto", cpu, native=True) == "bf16"
    assert precision.resolve_precision("auto", cpu, native=False) == "fp32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a native bf16 says nothing
        assert precision.resolve_precision("bf16", cpu, native=True) == "bf16"
    with pytest.warns(RuntimeWarning, match="set precision: auto"):
        assert precision.resolve_precision("bf16", cpu, native=False) == "bf16"
    with pytest.raises(ValueError, match="'fp16' is not one of"):
        precision.resolve_precision("fp16", cpu)
