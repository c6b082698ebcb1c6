"""Shared fixtures: deterministic seeds and offline settings for every test."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def padded_batch(vocab_size: int, lengths: list[int], pad_to: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) with real ids in [5, vocab) and pad id 0, and the 1/0 mask (B, T)."""
    t = pad_to or max(lengths)
    ids = torch.zeros(len(lengths), t, dtype=torch.long)
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, vocab_size, (n,))
        mask[row, :n] = 1
    return ids, mask
