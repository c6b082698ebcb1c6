"""A small, generic training loop: AdamW with decoupled weight decay (and per-parameter LR
multipliers), warmup then decay, gradient clipping and accumulation, bf16 autocast, periodic
evaluation, a step limit, a wall-clock budget, hooks (adversarial training, unfreezing) and
checkpoint / resume.

References: BERT's optimiser recipe (AdamW, no weight decay on biases and LayerNorm weights,
linear warmup then linear decay); the wall-clock budget follows Cramming (Geiping & Goldstein
2022): training stops when the budget is spent, less the time the final evaluation will take
(timed as the latest one; before one has run, estimated from the tokens it reads at the training
throughput), so the whole loop, final evaluation included, keeps to it. The schedule is laid out
over ``max_steps`` (``schedule_clock: steps``: torch's own ``LinearLR``, ``CosineAnnealingLR``,
``SequentialLR``) or, as in Cramming, over whichever runs out first, the steps or the time budget
(``schedule_clock: budget``: the same curve in closed form, ``lr_factor``, at the larger of the
two progresses), so a loop the budget stops still ends its decay instead of being cut at a high
learning rate.
Side effects (metrics) go through a ``Tracker``; ``NullTracker`` records nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    SequentialLR,
)

from minibert.distributed import World
from minibert.files import ArtifactError, atomic_output
from minibert.precision import autocast, resolve_precision
from minibert.train_config import LoopConfig, OptimConfig
from minibert.validation import ConfigError


class Tracker(Protocol):
    """Where training reports to (MLflow in the pipeline, nothing in tests)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


class NullTracker:
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass


class RecordingTracker:
    """Keeps every logged metric in memory (for tests and plot files), passing it on to ``inner``."""

    def __init__(self, inner: Tracker | None = None) -> None:
        self.inner = inner
        self.history: list[tuple[int | None, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.history.append((step, dict(metrics)))
        if self.inner is not None:
            self.inner.log_metrics(metrics, step)

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of every record holding ``key``."""
        return [(step, m[key]) for step, m in self.history if key in m and step is not None]


def _linear_decay(optimizer: torch.optim.Optimizer, steps: int) -> LRScheduler:
    return LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=max(steps, 1))


def _cosine_decay(optimizer: torch.optim.Optimizer, steps: int) -> LRScheduler:
    return CosineAnnealingLR(optimizer, T_max=max(steps, 1))


def _constant(optimizer: torch.optim.Optimizer, steps: int) -> LRScheduler:
    return LambdaLR(optimizer, lambda _: 1.0)


SCHEDULES: dict[str, Callable[[torch.optim.Optimizer, int], LRScheduler]] = {
    "linear": _linear_decay,
    "cosine": _cosine_decay,
    "constant": _constant,
}


def lr_factor(schedule: str, warmup: int, max_steps: int, at: float) -> float:
    """The LR multiplier of ``build_scheduler``'s step schedule at step ``at``, in closed form, so
    that ``at`` may be fractional (a progress measured in time): a linear ramp from 1 / (warmup + 1)
    to 1 over ``warmup`` steps, then ``schedule`` over the rest, held at its end value past it."""
    if at < warmup:
        return (1.0 + at) / (warmup + 1)
    done = min(max(at - warmup, 0.0) / max(max_steps - warmup, 1), 1.0)
    if schedule == "linear":
        return 1.0 - done
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * done))
    return 1.0


def min_warmup_steps(cfg: OptimConfig, warmup: int) -> int:
    """The fewest steps a warmup on the budget clock may take: Adam's "untuned" warmup of
    2 / (1 - beta2) steps (Ma & Yarats 2021; 100 at beta2 = 0.98), or the step schedule's own
    ``warmup`` when that is shorter."""
    return min(int(math.ceil(2.0 / (1.0 - cfg.betas[1]))), warmup)


def _no_decay(name: str, param: Tensor) -> bool:
    return param.dim() < 2 or "norm" in name  # biases, LayerNorm weights and gains


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, lr_scale: Callable[[str], float] | None = None
) -> torch.optim.AdamW:
    """AdamW; parameters grouped by (weight decay or not, LR multiplier from ``lr_scale``).

    Biases and norm gains get no weight decay. Frozen parameters are included (their grad stays
    None, so AdamW skips them) so that unfreezing later needs no new optimizer.
    """
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    for name, param in model.named_parameters():
        key = (not _no_decay(name, param), 1.0 if lr_scale is None else lr_scale(name))
        groups.setdefault(key, []).append(param)
    param_groups = [
        {"params": params, "weight_decay": cfg.weight_decay if decay else 0.0, "lr": cfg.lr * scale}
        for (decay, scale), params in sorted(groups.items(), key=lambda kv: (not kv[0][0], -kv[0][1]))
    ]
    on_gpu = any(p.is_cuda for group in param_groups for p in group["params"])
    # fused: one kernel for the whole update on a GPU (the foreach default launches several per group)
    return torch.optim.AdamW(param_groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=True if on_gpu else None)


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, max_steps: int, time_progress: Callable[[], float] | None = None
) -> LRScheduler:
    """Linear warmup over warmup_ratio * max_steps, then the configured decay to the end.

    With ``schedule_clock: budget`` and a ``time_progress`` (the fraction of the training time spent,
    0 to 1: ``fit`` gives elapsed / (budget less the time kept back for the final evaluation)), the
    schedule stands at step max(step, time_progress() * max_steps): the curve is the same, and
    warmup and decay end when the steps or the time run out, whichever comes first.
    Warmup follows the time too: counted in steps, it would never end in a loop whose
    ``max_steps`` is a loose bound and whose budget is what stops it. But it never takes fewer steps
    than ``min_warmup_steps``: a GPU's first steps (each new batch shape) run 5-10x slower, and a
    1-minute budget's 6 % warmup ended within ~20 steps there, which collapsed the encoder.
    """
    warmup = int(math.ceil(cfg.warmup_ratio * max_steps))
    if cfg.schedule_clock == "budget" and time_progress is not None:
        floor = min_warmup_steps(cfg, warmup)

        def factor(step: int) -> float:
            by_time = lr_factor(cfg.schedule, warmup, max_steps, max(float(step), time_progress() * max_steps))
            return min(by_time, (1.0 + step) / (floor + 1)) if step < floor else by_time

        return LambdaLR(optimizer, factor)
    decay = SCHEDULES[cfg.schedule](optimizer, max_steps - warmup)
    if warmup == 0:
        return decay
    ramp = LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    return SequentialLR(optimizer, [ramp, decay], milestones=[warmup])


class Adversary(Protocol):
    """Adversarial training (FGM, PGD): extra passes after the clean backward, adding gradients."""

    def attack(self, model: nn.Module, batch: tuple[Tensor, ...], loss_fn: LossFn, scale: float) -> None: ...


# (model, batch) -> (mean loss, real tokens in the batch). The count may be a 0-dim tensor on the
# model's device: fit() reads values back only when it logs, so a GPU step waits on nothing.
LossFn = Callable[[nn.Module, tuple[Tensor, ...]], tuple[Tensor, "int | Tensor"]]


@dataclass
class Hooks:
    """Optional parts of a training run, all called from ``fit``."""

    evaluate: Callable[[nn.Module], dict[str, float]] | None = None  # in eval mode, no grad
    progress: Callable[[int, float], None] | None = None  # (step, last logged mean train loss) after each step
    before_step: Callable[[int], None] | None = None  # (step about to run), e.g. gradual unfreezing
    adversary: Adversary | None = None
    lr_scale: Callable[[str], float] | None = None  # parameter name -> LR multiplier (e.g. LLRD)
    should_stop: Callable[[], bool] | None = None  # checked after each step, e.g. early stopping
    # tokens an evaluation reads: until one has been timed, the time kept back for the final evaluation
    # is estimated from them at the training throughput (0: nothing is kept back until then)
    evaluate_tokens: int = 0


@dataclass
class LoopResult:
    steps: int
    seconds: float
    last_loss: float
    stopped_by: str  # "max_steps" | "time_budget" | "hook" (should_stop said so)
    evals: list[tuple[int, dict[str, float]]]
    resumed_from: int = 0  # step the run resumed at (0: a fresh start)
    precision: str = "fp32"  # what the run used: LoopConfig.precision with "auto" resolved
    seconds_before_resume: float = 0.0  # of ``seconds``, those the killed run spent (the budget counts them)


class Checkpointer:
    """Resumable training state in one file, written atomically; ``fingerprint`` names what the
    state belongs to (params and inputs), so a changed run never resumes from a stale file."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path, self.fingerprint = Path(path), fingerprint

    def load(self) -> dict | None:
        if not self.path.is_file():
            return None
        try:  # tensors and plain containers only: nothing in a checkpoint is unpickled as code
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as err:  # a damaged pickle fails with any of several errors (IndexError, EOFError, ...)
            raise ArtifactError(f"{self.path}: the resume checkpoint is unreadable (truncated or damaged; "
                                f"torch.load with weights_only=True raised {type(err).__name__}); "
                                "delete it to train this stage from step 0") from err
        return state if isinstance(state, dict) and state.get("fingerprint") == self.fingerprint else None

    def save(self, state: dict) -> None:
        with atomic_output(self.path) as tmp:
            torch.save({**state, "fingerprint": self.fingerprint}, tmp)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def _rng_state(device: torch.device) -> dict[str, Tensor]:
    """The generators a step draws from: the CPU one (data, masking) and, on a GPU, its own (dropout)."""
    state = {"torch_rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and "cuda_rng" in state:
        torch.cuda.set_rng_state(state["cuda_rng"], device)


FORWARD_SHARE = 1.0 / 3.0  # of a training step's time, its forward pass (backward ~2x the forward's FLOPs)


def estimate_eval_seconds(eval_tokens: int, train_tokens: float, train_seconds: float) -> float:
    """Seconds an evaluation over ``eval_tokens`` should take: forward passes only, at the training
    throughput of ``train_tokens`` in ``train_seconds``."""
    if train_tokens <= 0 or train_seconds <= 0:
        return 0.0
    return FORWARD_SHARE * eval_tokens * train_seconds / train_tokens


def _to(batch: tuple[Tensor, ...], device: torch.device) -> tuple[Tensor, ...]:
    return tuple(t.to(device, non_blocking=True) for t in batch)


def fit(
    model: nn.Module,
    batches: Iterator[tuple[Tensor, ...]],
    loss_fn: LossFn,
    optim_cfg: OptimConfig,
    loop: LoopConfig,
    tracker: Tracker,
    hooks: Hooks | None = None,
    checkpointer: Checkpointer | None = None,
    world: World | None = None,
) -> LoopResult:
    """Train until ``loop.max_steps`` optimizer steps or the time budget; returns what happened.

    ``batches`` must not run dry (an ``EpochStream``); to resume, it must also have
    ``state_dict`` / ``load_state_dict``. ``loss_fn(model, batch)`` returns (mean loss, tokens).
    With a ``checkpointer``, state is saved every ``loop.checkpoint_every`` steps and a run that
    finds a matching checkpoint continues from it (model, optimizer, scheduler, RNG, data
    position, elapsed time, evaluations); the file is removed when the run completes. A resumed
    run first replays to ``tracker`` what the killed run had logged, so its curves start at step 1.

    With a ``world`` of several processes (``torchrun``), ``batches`` must be each rank's shard
    of the same global batches; gradients are averaged across ranks, every rank ends with the
    same weights, and only rank 0 logs, reports progress and writes checkpoints.
    """
    hooks = hooks or Hooks()
    world = world or World()
    if world.distributed and hooks.adversary is not None:
        raise ConfigError("adversarial training (FGM / PGD) is not supported across processes yet; run it in one process")
    if not world.main:
        tracker, hooks = NullTracker(), dataclasses.replace(hooks, progress=None)
    device = next(model.parameters()).device
    precision = resolve_precision(loop.precision, device)
    optimizer = build_optimizer(model, optim_cfg, hooks.lr_scale)
    elapsed = 0.0  # rank 0's seconds of training, read before each stop check and each LR update
    # rank 0's seconds of the latest evaluation: the final one runs after the last step, and must fit in the budget too.
    # Until one has been timed (``evals`` empty), estimated at each log step from ``hooks.evaluate_tokens`` (else 0);
    # on the budget clock, each new value moves the LR by its share of the budget
    eval_reserve = 0.0
    # rank 0's budget on every rank: under the pipeline deadline each rank works its budget out a moment apart
    budget = None if loop.time_budget_s is None else world.shared(loop.time_budget_s)
    budget_clock = budget is not None and optim_cfg.schedule_clock == "budget"

    def budget_spent() -> float:  # the share of the training time (the budget less the final evaluation) used so far
        assert budget is not None
        left = budget - eval_reserve
        return elapsed / left if left > 0 else 1.0

    scheduler = build_scheduler(optimizer, optim_cfg, loop.max_steps, None if budget is None else budget_spent)
    evals: list[tuple[int, dict[str, float]]] = []
    logged: list[tuple[int, dict[str, float]]] = []  # every (step, metrics) given to the tracker, kept for a resume

    def log(metrics: dict[str, float], at: int) -> None:
        logged.append((at, metrics))
        tracker.log_metrics(metrics, step=at)

    step, spent_before = 0, 0.0
    saved = checkpointer.load() if checkpointer is not None else None
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        per_rank = saved["per_rank"]  # data position and RNG of each process
        if len(per_rank) != world.size:
            raise ArtifactError(f"{checkpointer.path} was written by a run of {len(per_rank)} process(es), this one has "
                                f"{world.size}; resume with as many, or delete it to start over")
        batches.load_state_dict(per_rank[world.rank]["batches"])  # type: ignore[attr-defined]
        _set_rng_state(per_rank[world.rank], device)
        step, spent_before, evals = saved["step"], saved["seconds"], saved["evals"]
        eval_reserve = saved.get("eval_seconds", 0.0)
        for at, metrics in saved["logged"]:
            log(metrics, at)
    resumed_from = step
    trained = model
    if world.distributed:
        from torch.nn.parallel import DistributedDataParallel

        trained = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    start = time.perf_counter() - spent_before
    window_loss, window_tokens, window_start, window_steps = 0.0, 0, time.perf_counter(), 0
    stopped_by, loss_value, shown_loss = "max_steps", float("nan"), float("nan")  # shown: the last logged mean

    def run_eval(at: int) -> None:
        nonlocal eval_reserve
        began = time.perf_counter()
        model.eval()
        with torch.no_grad():
            metrics = hooks.evaluate(model)
        model.train()
        eval_reserve = world.shared(time.perf_counter() - began)
        evals.append((at, metrics))
        log({f"eval_{k}": v for k, v in metrics.items()}, at)

    model.train()
    while step < loop.max_steps:
        if budget is not None:
            elapsed = world.shared(time.perf_counter() - start)  # every rank stops on rank 0's clock
            # kept back for the final evaluation: as long as the last one took (none yet: nothing)
            if elapsed + eval_reserve >= budget:
                stopped_by = "time_budget"
                break
        if hooks.before_step is not None:
            hooks.before_step(step)
        optimizer.zero_grad(set_to_none=True)
        loss_value, tokens = 0.0, 0
        for micro in range(loop.accumulate):
            batch = _to(next(batches), device)
            last = micro == loop.accumulate - 1  # DDP averages gradients across ranks once, on the last micro-batch
            sync = trained.no_sync() if world.distributed and not last else contextlib.nullcontext()
            with sync:
                with autocast(precision, device):
                    loss, n = loss_fn(trained, batch)
                (loss / loop.accumulate).backward()
            if hooks.adversary is not None:
                hooks.adversary.attack(model, batch, loss_fn, 1.0 / loop.accumulate)
            # device tensors, read back only when logging: a GPU step queues its kernels and never waits
            loss_value = loss_value + loss.detach().float() / loop.accumulate
            tokens = tokens + n
        grad_norm = (
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim_cfg.grad_clip)
            if optim_cfg.grad_clip > 0 else None
        )
        optimizer.step()
        if budget_clock:
            elapsed = world.shared(time.perf_counter() - start)  # the next step's LR, by the time now
        scheduler.step()
        step += 1
        window_loss, window_tokens, window_steps = window_loss + loss_value, window_tokens + tokens, window_steps + 1
        if step % loop.log_every == 0 or step == loop.max_steps:
            now = time.perf_counter()
            # every rank's share of the global batch
            loss_sum, tokens_sum = world.sum([float(window_loss), float(window_tokens)])
            shown_loss = loss_sum / world.size / window_steps
            if budget is not None and hooks.evaluate_tokens and not evals:
                eval_reserve = world.shared(estimate_eval_seconds(hooks.evaluate_tokens, tokens_sum / world.size,
                                                                  now - window_start))
            log({"train_loss": shown_loss, "lr": scheduler.get_last_lr()[0],
                 "grad_norm": float("nan") if grad_norm is None else float(grad_norm),
                 "tokens_per_s": tokens_sum / max(now - window_start, 1e-9),
                 "elapsed_s": now - start}, step)  # training seconds so far (the curves' time axis), evaluations included
            window_loss, window_tokens, window_start, window_steps = 0.0, 0, now, 0
        if hooks.progress is not None:
            hooks.progress(step, shown_loss)
        if hooks.evaluate is not None and loop.eval_every and step % loop.eval_every == 0 and step < loop.max_steps:
            run_eval(step)
        if hooks.should_stop is not None and world.agree(hooks.should_stop()):
            stopped_by = "hook"
            break
        if checkpointer is not None and loop.checkpoint_every and step % loop.checkpoint_every == 0 and step < loop.max_steps:
            per_rank = world.gather({"batches": batches.state_dict(), **_rng_state(device)})  # type: ignore[attr-defined]
            if world.main:
                checkpointer.save({
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "per_rank": per_rank, "step": step, "seconds": time.perf_counter() - start, "evals": evals,
                    "logged": logged, "eval_seconds": eval_reserve,
                })
    if hooks.evaluate is not None and not (evals and evals[-1][0] == step):
        run_eval(step)
    if checkpointer is not None and world.main:
        checkpointer.clear()
    world.barrier()
    return LoopResult(step, time.perf_counter() - start, float(loss_value), stopped_by, evals, resumed_from, precision,
                      spent_before)
