"""The benchmarks' host record refuses a part of the ISA caps that stand an AVX-512 host in for an AVX2-only one."""

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))
from machine import AVX2_ONLY as AVX2  # noqa: E402 - benchmarks/ is not a package


def test_a_benchmark_under_some_of_the_caps_exits_before_measuring_and_names_the_missing_ones() -> None:
    clean = {k: v for k, v in os.environ.items() if k not in AVX2}
    partial = subprocess.run([sys.executable, "-c", "import machine"], cwd=BENCH, capture_output=True, text=True,
                             env={**clean, "ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert partial.returncode == 1
    assert "without OV_CPU_MAX_ISA, ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS" in partial.stderr.splitlines()[-1]
    full = subprocess.run([sys.executable, "-c", "import machine, json; print(json.dumps(machine.describe()))"], cwd=BENCH,
                          capture_output=True, text=True, env={**clean, **AVX2})
    assert full.returncode == 0, full.stderr
    assert '"cpu_capability": "AVX2"' in full.stdout and '"OV_CPU_MAX_ISA": "AVX2"' in full.stdout
    none = subprocess.run([sys.executable, "-c", "import machine"], cwd=BENCH, capture_output=True, text=True, env=clean)
    assert none.returncode == 0, none.stderr
