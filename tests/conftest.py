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


WORDS = ("the film is a charming funny moving portrait of family dull lifeless script thin wonderful "
         "performances bored actors plot sense dialogue laughable director vision clumsy act").split()


def toy_texts(rng, lengths) -> list[str]:
    """Review-like word salads of the given word counts (from a fixed movie-review vocabulary)."""
    return [" ".join(rng.choice(WORDS, size=n)) for n in lengths]


def toy_tokenizer(folder):
    """A 120-token WordPiece trained on 300 word salads, saved to ``folder``: (tokenizer, path)."""
    import numpy as np

    from minibert.tokenizer import TokenizerConfig, save_tokenizer, train_wordpiece

    corpus = toy_texts(np.random.default_rng(0), [12] * 300)
    tok = train_wordpiece(iter(corpus), TokenizerConfig(vocab_size=120, min_frequency=1))
    return tok, save_tokenizer(tok, folder / "tokenizer.json")
