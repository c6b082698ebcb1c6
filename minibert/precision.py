"""Training and inference precision: fp32, bf16 autocast, or ``auto`` (bf16 only where the hardware runs it natively).

bf16 autocast pays only where bf16 arithmetic is native: CUDA GPUs from Ampere on, and CPUs with
AVX512-BF16 or AMX. Elsewhere oneDNN emulates it: on a 2-core AMD EPYC (Zen 3, AVX2 only) a
training step of the mini encoder was 21 to 28x slower in bf16 than in fp32
(``benchmarks/precision_speed.py``). A profile that said ``bf16`` there would spend its whole time
budget on a few dozen steps. ``auto`` picks per machine; an explicit ``bf16``
on such a CPU is honoured, with a warning.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from minibert.choices import PRECISION_CHOICES

PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX on this CPU (torch's own CPUID probes; private, so guarded)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 autocast runs natively (fast) on ``device``."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_has_native_bf16()
    return False


def resolve_precision(requested: str, device: torch.device, native: bool | None = None) -> str:
    """The precision a run uses: ``auto`` -> bf16 where native, else fp32. ``native`` overrides the
    hardware probe (tests)."""
    if requested not in PRECISION_CHOICES:
        raise ValueError(f"precision {requested!r} is not one of {list(PRECISION_CHOICES)}")
    if requested == "fp32":
        return "fp32"
    is_native = native_bf16(device) if native is None else native
    if requested == "auto":
        return "bf16" if is_native else "fp32"
    if not is_native:
        warnings.warn(f"precision bf16 on {device.type} without native bf16 (no AVX512-BF16 / AMX): autocast is "
                      "emulated and can be 25x slower than fp32 here; set precision: auto (or fp32) in params.yaml",
                      RuntimeWarning, stacklevel=2)
    return "bf16"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for a resolved ``precision`` (``resolve_precision``); fp32: a no-op."""
    dtype = PRECISIONS[precision]
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)
