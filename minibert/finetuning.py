"""Fine-tuning techniques: layer-wise LR decay, gradual unfreezing, FGM and PGD adversarial training.

References:
- LLRD: Howard & Ruder 2018 (ULMFiT, discriminative fine-tuning); Zhang et al. 2021
  ("Revisiting Few-sample BERT Fine-tuning"): layer l of L gets lr * decay^(L-1-l); the
  embeddings get lr * decay^L; the task head keeps lr.
- Gradual unfreezing: ULMFiT. The backbone starts frozen; every ``interval`` optimizer steps
  the next group thaws, top layer first, the embeddings last.
- FGM: Miyato et al. 2017 (adversarial training for text): perturb the word-embedding matrix
  by epsilon * g / ||g||, add the adversarial loss's gradients, restore the weights.
- PGD: Madry et al. 2018, as used for BERT fine-tuning (FreeLB's baseline): ``steps`` ascent
  steps of size alpha, projected into the epsilon ball; only the last step's gradients are
  added to the clean ones.
All act through ``minibert.trainer.Hooks`` (``lr_scale``, ``before_step``, ``adversary``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from minibert.model import SequenceClassifier
from minibert.trainer import LossFn

EMBEDDING = "backbone.embeddings.tokens.weight"


def _layer_index(name: str) -> int | None:
    prefix = "backbone.encoder.layers."
    return int(name[len(prefix):].split(".", 1)[0]) if name.startswith(prefix) else None


def llrd_scale(num_layers: int, decay: float) -> Callable[[str], float]:
    """Parameter name -> LR multiplier for layer-wise decay (1.0 = no decay)."""
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"layer-wise LR decay must be in (0, 1], got {decay}")

    def scale(name: str) -> float:
        layer = _layer_index(name)
        if layer is not None:
            return decay ** (num_layers - 1 - layer)
        if name.startswith("backbone.embeddings."):
            return decay**num_layers
        return 1.0  # the head, and the pre-norm stack's final norm (it sits above the top layer)

    return scale


class GradualUnfreezing:
    """``before_step`` hook: the head trains from step 0; backbone groups thaw top-down."""

    def __init__(self, model: SequenceClassifier, interval: int) -> None:
        if interval < 1:
            raise ValueError(f"unfreezing interval must be >= 1 step, got {interval}")
        layers = list(model.backbone.encoder.layers)
        self.groups: list[list[nn.Parameter]] = [list(layer.parameters()) for layer in reversed(layers)]
        self.groups.append(list(model.backbone.embeddings.parameters()))
        if model.backbone.encoder.final_norm is not None:
            self.groups[0].extend(model.backbone.encoder.final_norm.parameters())
        self.interval = interval

    def __call__(self, step: int) -> None:
        thawed = step // self.interval  # groups unfrozen so far
        for index, group in enumerate(self.groups):
            for param in group:
                param.requires_grad_(index < thawed)

    def thawed_groups(self) -> int:
        return sum(all(p.requires_grad for p in g) for g in self.groups)


def _embedding(model: nn.Module) -> nn.Parameter:
    return dict(model.named_parameters())[EMBEDDING]


class FGM:
    """Fast gradient method on the word embeddings (one extra forward / backward)."""

    def __init__(self, epsilon: float) -> None:
        self.epsilon = epsilon

    def attack(self, model: nn.Module, batch: tuple[Tensor, ...], loss_fn: LossFn, scale: float) -> None:
        weight = _embedding(model)
        if weight.grad is None:
            return
        norm = torch.linalg.vector_norm(weight.grad)
        if not torch.isfinite(norm) or norm == 0:
            return
        original = weight.detach().clone()  # restored by copy: add-then-subtract is not exact in float
        with torch.no_grad():
            weight.add_(self.epsilon * weight.grad / norm)
        adv_loss, _ = loss_fn(model, batch)
        (adv_loss * scale).backward()
        with torch.no_grad():
            weight.copy_(original)


class PGD:
    """Projected gradient descent on the word embeddings: ``steps`` ascent steps in an epsilon ball."""

    def __init__(self, epsilon: float, alpha: float, steps: int) -> None:
        if steps < 1:
            raise ValueError(f"PGD needs steps >= 1, got {steps}")
        self.epsilon, self.alpha, self.steps = epsilon, alpha, steps

    def attack(self, model: nn.Module, batch: tuple[Tensor, ...], loss_fn: LossFn, scale: float) -> None:
        weight = _embedding(model)
        if weight.grad is None:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        clean_grads = [None if p.grad is None else p.grad.clone() for p in params]
        original = weight.detach().clone()
        delta = torch.zeros_like(weight)
        for t in range(self.steps):
            norm = torch.linalg.vector_norm(weight.grad)
            if torch.isfinite(norm) and norm > 0:
                delta = delta + self.alpha * weight.grad / norm
                delta_norm = torch.linalg.vector_norm(delta)
                if delta_norm > self.epsilon:
                    delta = delta * (self.epsilon / delta_norm)
            with torch.no_grad():
                weight.copy_(original + delta)
            if t < self.steps - 1:
                model.zero_grad(set_to_none=False)
            else:  # the last step's gradients are added to the clean ones
                for p, g in zip(params, clean_grads):
                    p.grad = None if g is None else g.clone()
            adv_loss, _ = loss_fn(model, batch)
            (adv_loss * scale).backward()
        with torch.no_grad():
            weight.copy_(original)


# name -> builder(epsilon, alpha, steps); "none" trains without an adversary.
ADVERSARIES: dict[str, Callable[[float, float, int], FGM | PGD | None]] = {
    "none": lambda epsilon, alpha, steps: None,
    "fgm": lambda epsilon, alpha, steps: FGM(epsilon),
    "pgd": lambda epsilon, alpha, steps: PGD(epsilon, alpha, steps),
}
