"""A small, generic training loop: AdamW with decoupled weight decay, warmup then decay,
gradient clipping, periodic evaluation, a step limit and an optional wall-clock budget.

References: BERT's optimiser recipe (AdamW, no weight decay on biases and LayerNorm weights,
linear warmup then linear decay); the wall-clock budget follows Cramming (Geiping & Goldstein
2022): training stops when the budget is spent, and the schedule is laid out over ``max_steps``.
LR schedules are torch's own (``LinearLR``, ``CosineAnnealingLR``, ``SequentialLR``).
Side effects (metrics) go through a ``Tracker``; ``NullTracker`` records nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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

from minibert.validation import ConfigError, check_choice, check_types


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


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 5e-4
    weight_decay: float = 0.01  # not applied to biases, norms or embeddings' padding
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    warmup_ratio: float = 0.06  # fraction of max_steps spent warming up linearly from ~0
    schedule: str = "linear"  # decay after warmup: key of SCHEDULES
    grad_clip: float = 1.0  # max global grad norm; 0 disables

    def __post_init__(self) -> None:
        check_types(self)
        if self.lr <= 0 or self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError(f"optim: need lr > 0, weight_decay >= 0, grad_clip >= 0; got {self}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio: {self.warmup_ratio} must be in [0, 1)")
        check_choice(self.schedule, SCHEDULES, "schedule")


def _no_decay(name: str, param: Tensor) -> bool:
    return param.dim() < 2 or "norm" in name  # biases, LayerNorm weights and gains


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW with two groups: decayed weight matrices, and undecayed biases / norms."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in params if not _no_decay(n, p)], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in params if _no_decay(n, p)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, max_steps: int) -> LRScheduler:
    """Linear warmup over warmup_ratio * max_steps, then the configured decay to the end."""
    warmup = int(math.ceil(cfg.warmup_ratio * max_steps))
    decay = SCHEDULES[cfg.schedule](optimizer, max_steps - warmup)
    if warmup == 0:
        return decay
    ramp = LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    return SequentialLR(optimizer, [ramp, decay], milestones=[warmup])


@dataclass(frozen=True)
class LoopConfig:
    max_steps: int
    time_budget_s: float | None = None  # stop early when spent (Cramming-style); None = no limit
    log_every: int = 50
    eval_every: int = 0  # 0: evaluate only at the end


@dataclass
class LoopResult:
    steps: int
    seconds: float
    last_loss: float
    stopped_by: str  # "max_steps" | "time_budget"
    evals: list[tuple[int, dict[str, float]]]


def fit(
    model: nn.Module,
    batches: Iterator[tuple[Tensor, ...]],
    loss_fn: Callable[[nn.Module, tuple[Tensor, ...]], tuple[Tensor, int]],
    optim_cfg: OptimConfig,
    loop: LoopConfig,
    tracker: Tracker,
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> LoopResult:
    """Train until ``loop.max_steps`` or the time budget; returns what happened.

    ``batches`` must not run dry before max_steps (make it cycle over epochs).
    ``loss_fn(model, batch)`` returns (mean loss, tokens in the batch) and may not step.
    ``evaluate(model)`` runs in eval mode every ``eval_every`` steps and at the end;
    its metrics are logged with an ``eval_`` prefix.
    """
    optimizer = build_optimizer(model, optim_cfg)
    scheduler = build_scheduler(optimizer, optim_cfg, loop.max_steps)
    start = time.perf_counter()
    window_loss, window_tokens, window_start = 0.0, 0, start
    evals: list[tuple[int, dict[str, float]]] = []
    stopped_by, step, loss_value = "max_steps", 0, float("nan")

    def run_eval(at: int) -> None:
        model.eval()
        with torch.no_grad():
            metrics = evaluate(model)
        model.train()
        evals.append((at, metrics))
        tracker.log_metrics({f"eval_{k}": v for k, v in metrics.items()}, step=at)

    model.train()
    while step < loop.max_steps:
        if loop.time_budget_s is not None and time.perf_counter() - start >= loop.time_budget_s:
            stopped_by = "time_budget"
            break
        batch = next(batches)
        loss, tokens = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if optim_cfg.grad_clip > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), optim_cfg.grad_clip))
        else:
            grad_norm = float("nan")
        optimizer.step()
        scheduler.step()
        step += 1
        loss_value = float(loss.detach())
        window_loss += loss_value
        window_tokens += tokens
        if step % loop.log_every == 0 or step == loop.max_steps:
            now = time.perf_counter()
            n = step % loop.log_every or loop.log_every
            tracker.log_metrics(
                {
                    "train_loss": window_loss / n,
                    "lr": scheduler.get_last_lr()[0],
                    "grad_norm": grad_norm,
                    "tokens_per_s": window_tokens / max(now - window_start, 1e-9),
                },
                step=step,
            )
            window_loss, window_tokens, window_start = 0.0, 0, now
        if progress is not None:
            progress(step, loss_value)
        if evaluate is not None and loop.eval_every and step % loop.eval_every == 0 and step < loop.max_steps:
            run_eval(step)
    if evaluate is not None:
        run_eval(step)
    return LoopResult(step, time.perf_counter() - start, loss_value, stopped_by, evals)
