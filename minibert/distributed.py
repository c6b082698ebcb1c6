"""Data-parallel training across processes (``torchrun``): who this process is, and the few
collective operations the training loop needs.

``World.from_env()`` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK); without it
the world is one process and nothing here does anything. ``fit`` wraps the model in
``DistributedDataParallel`` when the world has more than one process: each rank trains on its
shard of every global batch (``EpochStream(shard=...)``), gradients are averaged across ranks
(with ``no_sync`` on all but the last micro-batch of an accumulation), and only rank 0 logs and
writes checkpoints. Decisions that must agree (stop on the time budget, the LR on a budget clock)
are taken by rank 0 and broadcast.

torch is imported inside the methods that use it: the pipeline's light stages ask only
``World.from_env().main`` (log from rank 0 only) and never load torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minibert.validation import ConfigError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @classmethod
    def from_env(cls) -> World:
        """torchrun's RANK / WORLD_SIZE / LOCAL_RANK, or a world of one."""
        try:
            world = cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)))
        except ValueError as err:
            raise ConfigError(f"RANK / WORLD_SIZE / LOCAL_RANK must be integers (as torchrun sets them): {err}") from err
        if not 0 <= world.rank < world.size:
            raise ConfigError(f"RANK={world.rank} is outside WORLD_SIZE={world.size}")
        return world

    def device(self) -> torch.device:
        """This rank's GPU (by LOCAL_RANK) when CUDA is available, else the CPU."""
        import torch
        return torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")

    def init(self) -> None:
        """Join the process group (nccl on GPU, gloo on CPU) once; a no-op for a world of one."""
        import torch
        import torch.distributed as dist
        if self.distributed and not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(backend=backend, rank=self.rank, world_size=self.size)

    def barrier(self) -> None:
        import torch.distributed as dist
        if self.distributed and dist.is_initialized():
            dist.barrier()

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag``, on every rank (so that all ranks stop at the same step)."""
        import torch
        import torch.distributed as dist
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)], device=self.device())
        dist.broadcast(value, src=0)
        return bool(value.item())

    def shared(self, value: float) -> float:
        """Rank 0's ``value``, on every rank (a clock all ranks must read alike)."""
        import torch
        import torch.distributed as dist
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device())
        dist.broadcast(tensor, src=0)
        return float(tensor.item())

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sums of ``values`` over all ranks, on every rank."""
        import torch
        import torch.distributed as dist
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device())
        dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, obj: object) -> list:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        import torch.distributed as dist
        if not self.distributed:
            return [obj]
        out: list = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def check_batch(self, batch_size: int, key: str) -> None:
        if batch_size % self.size:
            raise ConfigError(f"{key}: {batch_size} is not divisible by the {self.size} processes of this run; "
                              "each rank takes an equal share of every global batch")
