"""Training on several processes: ``torchrun`` starts them, DistributedDataParallel syncs them.

Nothing to configure: under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) the arena
joins the process group (gloo on the CPU, nccl on CUDA), each rank trains on its slice of every
global batch, and only rank 0 writes files. Alone, it is one process of world size 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DEVICES", "World", "world"]


@dataclass(frozen=True)
class World:
    """Where this process stands: its ``rank`` among ``size`` processes and its ``device``."""

    rank: int
    size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that prints and writes files."""
        return self.rank == 0

    def rows(self, batch_size: int) -> slice:
        """This rank's rows of a global batch of ``batch_size`` rows (contiguous, equal parts).

        Raises:
            ValueError: when ``batch_size`` is not a multiple of the world size.
        """
        if batch_size % self.size:
            raise ValueError(
                f"batch_size ({batch_size}) must be a multiple of the number of processes "
                f"({self.size})"
            )
        part = batch_size // self.size
        return slice(self.rank * part, (self.rank + 1) * part)

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over every process (itself when alone)."""
        return self.sum(value) / self.size

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over every process (itself when alone)."""
        if self.size == 1:
            return value
        total = value.detach().clone()
        dist.all_reduce(total)
        return total

    def main_says(self, value: bool) -> bool:
        """Rank 0's ``value`` on every process (so all take the same branch)."""
        if self.size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return bool(box[0])

    def barrier(self) -> None:
        """Wait for every process (nothing when alone)."""
        if self.size > 1:
            dist.barrier()


DEVICES = ("auto", "cpu", "cuda")


def world(device: str = "auto") -> World:
    """This process's :class:`World`, joining the process group on first use under ``torchrun``.

    Args:
        device: ``"auto"`` (CUDA when torch sees a GPU, else the CPU), ``"cpu"`` or
            ``"cuda"`` (refused where torch sees no GPU). The backend follows the device:
            nccl on CUDA, gloo on the CPU.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' was asked for, but torch sees no CUDA device here")
    cuda = torch.cuda.is_available() and device != "cpu"
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(0, 1, torch.device("cuda" if cuda else "cpu"))
    rank = int(os.environ["RANK"])
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        place = torch.device("cuda", local)
    else:
        place = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if place.type == "cuda" else "gloo")
    return World(rank, size, place)
