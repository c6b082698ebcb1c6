"""What the benchmark records say about the machine they ran on: CPU model, cores, torch's CPU capability."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def describe() -> dict[str, str]:
    """``machine`` ("<CPU model>, <n> cores") and ``cpu_capability`` (torch's kernel level: AVX2, AVX512, ...)."""
    return {"machine": f"{cpu_model()}, {os.cpu_count()} cores", "cpu_capability": torch.backends.cpu.get_cpu_capability()}
