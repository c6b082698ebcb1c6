"""Training configs: the optimiser, the training loop and the PPMI embedding initialisation.

Frozen and validated when made, like ``ModelConfig``, and free of torch (string choices are checked
against ``minibert.choices``), so the pipeline reads params without importing torch. The code they
configure lives beside torch: ``trainer.build_optimizer`` / ``build_scheduler`` / ``fit`` and
``embedding_init.ppmi_svd``.
"""

from __future__ import annotations

from dataclasses import dataclass

from minibert.choices import PRECISION_CHOICES, SCHEDULE_CLOCKS, SCHEDULES
from minibert.validation import ConfigError, check_choice, check_types


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 5e-4
    weight_decay: float = 0.01  # not applied to biases, norms or embeddings' padding
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    warmup_ratio: float = 0.06  # fraction of max_steps spent warming up linearly from ~0
    schedule: str = "linear"  # decay after warmup: key of trainer.SCHEDULES
    grad_clip: float = 1.0  # max global grad norm; 0 disables
    # what the schedule's progress counts: steps (step / max_steps) | budget (the larger of that and
    # elapsed / time budget, so a loop its time budget stops still finishes warmup and decay; Cramming)
    schedule_clock: str = "steps"

    def __post_init__(self) -> None:
        check_types(self)
        if self.lr <= 0 or self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError(f"optim: need lr > 0, weight_decay >= 0, grad_clip >= 0; got {self}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio: {self.warmup_ratio} must be in [0, 1)")
        check_choice(self.schedule, SCHEDULES, "schedule")
        check_choice(self.schedule_clock, SCHEDULE_CLOCKS, "schedule_clock")


@dataclass(frozen=True)
class LoopConfig:
    max_steps: int  # optimizer steps; the LR schedule is laid out over them (and the time budget: OptimConfig.schedule_clock)
    time_budget_s: float | None = None  # stop early when spent, the final evaluation included (trainer.fit); None = no limit
    log_every: int = 50
    eval_every: int = 0  # 0: evaluate only at the end
    accumulate: int = 1  # micro-batches per optimizer step (gradient accumulation)
    precision: str = "fp32"  # fp32 | bf16 (forward and loss under autocast) | auto (bf16 where native; minibert.precision)
    checkpoint_every: int = 0  # optimizer steps between resumable checkpoints; 0 = never

    def __post_init__(self) -> None:
        check_types(self)
        if self.max_steps < 1 or self.accumulate < 1 or self.log_every < 1:
            raise ConfigError(f"need max_steps, accumulate, log_every >= 1; got {self}")
        check_choice(self.precision, PRECISION_CHOICES, "precision")


@dataclass(frozen=True)
class PPMIConfig:
    window: int = 5  # co-occurrences up to this many tokens apart, weighted 1/distance
    alpha: float = 0.75  # context-distribution smoothing exponent
    max_tokens: int = 10000  # rows / columns of the count matrix: the most frequent ids
    init_std: float = 0.02  # the result is rescaled to BERT's initialisation scale

    def __post_init__(self) -> None:
        if self.window < 1 or not 0.0 < self.alpha <= 1.0 or self.max_tokens < 2 or self.init_std <= 0:
            raise ConfigError(f"ppmi: need window >= 1, 0 < alpha <= 1, max_tokens >= 2, init_std > 0; got {self}")
