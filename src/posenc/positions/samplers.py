"""Position samplers for training: which positions a short training row is shown at, so that
a model trained on short rows meets the positions of long ones.

Not encodings: they choose the ``[batch, seq]`` positions any 1-D encoding is then given
(``positions=`` of :class:`~posenc.models.TransformerLM`, :func:`posenc.attention`), and
evaluation keeps the plain ``arange``.

- :func:`randomized` (Ruoss et al. 2023, "Randomized positional encodings boost length
  generalization of transformers", ACL, arXiv:2305.16843): each row's positions are a
  sorted random subset of ``[0, max_position)``, so a row of L tokens sees positions up to
  ``max_position`` (much larger than L), always in order.
- :func:`pose` (Zhu et al. 2024, "PoSE: efficient context window extension of LLMs via
  positional skip-wise training", ICLR, arXiv:2309.10400): each row is split into
  ``chunks`` contiguous chunks at random points; chunk i is shifted by a skip ``u_i`` with
  ``u_0 = 0`` and ``u_i`` uniform in ``[u_{i-1}, max_position - L]``, so positions stay
  consecutive inside a chunk and the last one stays below ``max_position``.

Both draw from a ``torch.Generator`` only, so a training step's positions are a function of
its generator (the arena's bitwise resume holds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ..config import MAX_POSITION, check_device, check_generator, check_int

__all__ = ["DENSE_RANGE", "SAMPLERS", "PositionSampler", "pose", "randomized"]

#: the ranges :func:`randomized` draws a whole random order of (``batch × max_position``
#: floats); larger ones (past twice the length too) are drawn sparsely
DENSE_RANGE = 1 << 16


def _check(batch: int, length: int, max_position: int, generator: Any, device: Any) -> None:
    check_generator(generator)
    check_device(device)
    check_int("batch", batch)
    check_int("length", length)
    check_int("max_position", max_position, maximum=MAX_POSITION)
    if max_position < length:
        raise ValueError(
            f"max_position ({max_position}) must be >= length ({length}): a row of "
            f"{length} tokens needs {length} distinct positions below it"
        )


def randomized(
    batch: int,
    length: int,
    max_position: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Randomized positions: per row, ``length`` distinct positions drawn uniformly from
    ``[0, max_position)`` without replacement, in increasing order.

    Up to :data:`DENSE_RANGE` (or ``2 · length``) positions the draw is a random order of
    the whole range per row; past it, a sparse draw (:func:`_sparse_subset`) that holds
    ``O(length)`` per row, so ``max_position`` may be as large as ``2**53``.

    Shapes:
        returns ``[batch, length]`` int64.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> p = randomized(2, 5, 100, generator=g)
        >>> p.shape, bool((p.diff(dim=1) > 0).all()), int(p.max()) < 100
        (torch.Size([2, 5]), True, True)
    """
    _check(batch, length, max_position, generator, device)
    if max_position <= max(2 * length, DENSE_RANGE):
        keys = torch.rand(batch, max_position, generator=generator)  # a random order per row
        chosen = keys.argsort(dim=1)[:, :length]
        return chosen.sort(dim=1).values.to(device)
    rows = [_sparse_subset(length, max_position, generator) for _ in range(batch)]
    return torch.stack(rows).to(device)


def _sparse_subset(length: int, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """``length`` distinct values of ``[0, n)``, uniform over the subsets, sorted, without
    an ``[n]`` tensor (for ``n > 2 · length``): iid draws of the missing count, kept while
    new, until ``length`` are distinct. A round never draws more than are missing, so the
    set is that of the first ``length`` distinct values of an iid sequence: uniform. At
    least half of ``[0, n)`` is free, so each round halves the missing count on average.

    Shapes:
        -> ``[length]`` int64, increasing.
    """
    chosen = torch.empty(0, dtype=torch.long)
    while chosen.numel() < length:
        draws = torch.randint(n, (length - chosen.numel(),), generator=generator)
        chosen = torch.cat((chosen, draws)).unique()  # sorted
    return chosen


def pose(
    batch: int,
    length: int,
    max_position: int,
    *,
    chunks: int = 2,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """PoSE's skip-wise positions: per row, ``chunks`` contiguous chunks (split at random
    points, each at least one token), chunk i at ``arange`` shifted by ``u_i``, ``u_0 = 0``,
    ``u_i`` uniform in ``[u_{i-1}, max_position - length]``.

    Shapes:
        returns ``[batch, length]`` int64, increasing along each row, below ``max_position``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> p = pose(1, 6, 50, chunks=2, generator=g)
        >>> steps = p.diff(dim=1)[0]
        >>> int((steps > 1).sum()) <= 1, bool((steps >= 1).all()), int(p.max()) < 50
        (True, True, True)
    """
    _check(batch, length, max_position, generator, device)
    check_int("chunks", chunks)
    if chunks > length:
        raise ValueError(f"chunks ({chunks}) must be <= length ({length}): none may be empty")
    # chunk starts: 0 and chunks - 1 distinct cut points in 1..length-1, sorted
    cuts = torch.rand(batch, length - 1, generator=generator).argsort(dim=1)[:, : chunks - 1]
    starts = torch.cat((torch.zeros(batch, 1, dtype=torch.long), (cuts + 1).sort(1).values), 1)
    room = max_position - length  # the largest skip
    skips = [torch.zeros(batch, dtype=torch.long)]
    for _ in range(chunks - 1):  # u_i uniform in [u_{i-1}, room]
        low = skips[-1]
        draw = torch.rand(batch, generator=generator)
        skips.append(low + (draw * (room - low + 1)).long().clamp(max=room - low))
    token = torch.arange(length)
    chunk = (token[None, :] >= starts[:, :, None]).sum(dim=1) - 1  # [batch, length]
    return (token + torch.stack(skips, dim=1).gather(1, chunk)).to(device)


#: the samplers by name, as ``PositionSampler.kind`` and ``posenc arena run --positions`` take
SAMPLERS: dict[str, Callable[..., torch.Tensor]] = {"randomized": randomized, "pose": pose}


@dataclasses.dataclass(frozen=True)
class PositionSampler:
    """A sampler and its settings: ``sampler(batch, length, generator)`` gives the training
    positions of one batch.

    Attributes:
        kind: ``"randomized"`` or ``"pose"`` (:data:`SAMPLERS`).
        max_position: positions are drawn below it (Ruoss et al.'s N; PoSE's target length).
        chunks: PoSE's number of chunks (2, the paper's best); ignored by ``randomized``.
    """

    kind: str
    max_position: int
    chunks: int = 2

    def __post_init__(self) -> None:
        if self.kind not in SAMPLERS:
            raise ValueError(f"kind must be one of {sorted(SAMPLERS)}, got {self.kind!r}")
        check_int("max_position", self.max_position, maximum=MAX_POSITION)
        check_int("chunks", self.chunks)

    def __call__(
        self, batch: int, length: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``[batch, length]`` int64 positions."""
        if self.kind == "pose":
            return pose(batch, length, self.max_position, chunks=self.chunks, generator=generator)
        return randomized(batch, length, self.max_position, generator=generator)

    def describe(self) -> str:
        """``"randomized below 640"``, ``"pose 2 chunks below 160"``."""
        chunks = f" {self.chunks} chunks" if self.kind == "pose" else ""
        return f"{self.kind}{chunks} below {self.max_position}"
