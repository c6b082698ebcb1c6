"""benchmarks/cuda_parity.py, the check run before a timed GPU run: with CUDA, every bound holds
(CPU vs CUDA fp32, sdpa vs eager, bf16 vs fp32). Skipped on machines without CUDA, such as CI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_the_cpu_within_the_bounds(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_parity.py"), "--device", "cuda",
                          "--out", str(tmp_path / "parity.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    result = json.loads((tmp_path / "parity.json").read_text())["cuda_parity"]
    assert result["failed"] == [] and set(result["max_abs_diff"]) == set(result["bounds"])
    assert result["max_abs_diff"]["classifier_logits"] <= 1e-4
