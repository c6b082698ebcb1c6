"""Length-bucketed batching with dynamic padding, so little compute goes to [PAD].

Reference: the "bucket by length" samplers of fairseq and ``transformers``'
``LengthGroupedSampler``: shuffle, cut into mega-batches of ``bucket_size`` batches, sort each
mega-batch by length, slice it into batches, shuffle the batch order. Each batch is padded to
its own longest sequence, not to a global maximum.

Shape legend: B batch, T longest sequence in the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where a function needs it: the runtime's batching stays torch-free
    import torch
    from torch import Tensor


def bucketed_batches(
    lengths: Sequence[int] | np.ndarray, batch_size: int, rng: np.random.Generator, bucket_size: int = 50
) -> list[np.ndarray]:
    """Index arrays, one a batch, covering every example exactly once (last batches may be short)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.asarray(lengths)
    order = rng.permutation(len(lengths))
    mega = batch_size * bucket_size
    batches = []
    for start in range(0, len(order), mega):
        chunk = order[start : start + mega]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def sorted_batches(lengths: Sequence[int] | np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Deterministic batches of similar length, for evaluation (no shuffling)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pad_ids(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad to the longest sequence: ids (B, T) int64 and attention mask (B, T) int64, numpy."""
    longest = max((len(s) for s in sequences), default=0)
    ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), longest), dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return ids, mask


def batched_logits(
    run: Callable[[np.ndarray, np.ndarray], np.ndarray], sequences: Sequence[Sequence[int]], batch_size: int, pad_id: int
) -> np.ndarray:
    """(N, L) float32 outputs of ``run(ids, mask)`` over length-sorted padded batches, in input order."""
    out: np.ndarray | None = None
    for index in sorted_batches([len(s) for s in sequences], batch_size):
        logits = np.asarray(run(*pad_ids([sequences[i] for i in index], pad_id)), dtype=np.float32)
        if out is None:
            out = np.empty((len(sequences), logits.shape[1]), dtype=np.float32)
        out[index] = logits
    if out is None:
        raise ValueError("no sequences to predict")
    return out


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """``pad_ids`` as torch tensors (sharing memory): ids (B, T) int64 and attention mask (B, T) int64."""
    import torch

    ids, mask = pad_ids(sequences, pad_id)
    return torch.from_numpy(ids), torch.from_numpy(mask)


class EpochStream:
    """Endless batches over a dataset: length-bucketed, reshuffled every epoch, resumable.

    ``make_batch(indices, generator)`` turns example indices into a batch of tensors; the
    generator carries its randomness (MLM masking), so it is part of the saved state. An
    epoch's batch plan is a pure function of (seed, epoch): the state is (epoch, position,
    generator state), and a stream restored from it yields exactly the batches the original
    would have yielded next. With ``shard=(rank, size)`` every process follows the same plan and
    keeps its share of each batch (data-parallel training).
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int,
        seed: int,
        make_batch: Callable[[np.ndarray, torch.Generator], tuple[Tensor, ...]],
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        self.shard = shard  # (rank, world size): this process takes rows rank, rank + size, ... of each batch
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.make_batch = make_batch
        import torch

        self.generator = torch.Generator().manual_seed(seed + 7919 * shard[0])  # one plan, a mask stream per rank
        self.epoch, self.position = 0, 0
        self._plan: list[np.ndarray] | None = None

    def _plan_for(self, epoch: int) -> list[np.ndarray]:
        return bucketed_batches(self.lengths, self.batch_size, np.random.default_rng([self.seed, epoch]))

    def __iter__(self) -> EpochStream:
        return self

    def __next__(self) -> tuple[Tensor, ...]:
        if self._plan is None:
            self._plan = self._plan_for(self.epoch)
        if self.position >= len(self._plan):
            self.epoch, self.position = self.epoch + 1, 0
            self._plan = self._plan_for(self.epoch)
        index = self._plan[self.position]
        self.position += 1
        rank, size = self.shard
        if size > 1 and len(index) < size:  # a last batch too small to share: every rank skips it alike
            return next(self)
        return self.make_batch(index[rank::size], self.generator)

    def batches_per_epoch(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self.generator.set_state(state["generator"])
        self._plan = None
