"""What the benchmark records say about the machine they ran on: CPU model, cores, torch's CPU capability."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


# Caps on the instruction sets the libraries dispatch to, which let an AVX-512 host stand in for an AVX2-only one:
# oneDNN's (OpenVINO's CPU plugin and torch's oneDNN kernels), OpenVINO's own kernels, torch's ATen kernels, MKL's.
# ONNX Runtime's MLAS has none: it keeps the host's full instruction set.
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "OV_CPU_MAX_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
ISA_CAPS = tuple(AVX2_ONLY)


def partial_caps(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why a set of ``ISA_CAPS`` is not an emulated host (None when none or all four are set). A part of them makes a
    machine that exists nowhere, and one that crashes: with ``ONEDNN_MAX_CPU_ISA=AVX2`` alone, OpenVINO still compiles
    for the host's bf16 and its ``infer`` dies of a segmentation fault."""
    missing = [name for name in ISA_CAPS if name not in environ]
    if len(missing) in (0, len(ISA_CAPS)):
        return None
    given = [name for name in ISA_CAPS if name in environ]
    example = " ".join(f"{name}={value}" for name, value in AVX2_ONLY.items())
    return (f"ISA caps {', '.join(given)} are set without {', '.join(missing)}: set all four (an AVX2-only host is "
            f"{example}) or none")


if (_why := partial_caps()) is not None:  # every benchmark imports this module first: refuse before measuring anything
    raise SystemExit(f"error: {_why}")


def describe() -> dict[str, object]:
    """``machine`` ("<CPU model>, <n> cores"), ``cpu_capability`` (torch's kernel level: AVX2, AVX512, ...) and,
    where any is set, ``isa_caps``: the ``ISA_CAPS`` variables this process ran under."""
    caps = {name: os.environ[name] for name in ISA_CAPS if name in os.environ}
    return {"machine": f"{cpu_model()}, {os.cpu_count()} cores", "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            **({"isa_caps": caps} if caps else {})}
