"""A KV cache whose shapes never change: one compiled decode step serves every position.

:class:`~posenc.attn.KVCache` returns the keys seen so far, ``[..., length, ...]``: a new
shape at every step, so ``torch.compile`` compiles again at every token. Here every layer
returns its whole buffer, ``[batch, kv_heads, max_seq_len, width]``, written in place at
the new tokens' slots (``index_copy_``), and the number of tokens held is a tensor
(:attr:`StaticKVCache.filled`): the slots not written yet are hidden by a padding mask
the model builds from it (:func:`~posenc.models.shared.forward_inputs`). A generation
then compiles twice: the prompt, and the one-token step (the layout of transformers'
``StaticCache``; Hugging Face, "Optimizing inference: static kv-cache and
torch.compile"). The buffers are zeros until written, so a masked slot holds no NaN.
"""

from __future__ import annotations

from functools import partial

import torch

from ..config import check_int
from ..host_reads import read, reads_values
from .cache import KVCache

__all__ = ["StaticKVCache"]


class StaticKVCache(KVCache):
    """Keys, values, positions (and FoX clocks) of every layer, ``max_seq_len`` slots each,
    written in place: every step of a decode sees the same shapes.

    Takes :class:`~posenc.attn.KVCache`'s arguments except ``keep``: every layer keeps
    every key (a window or chunk is masked by positions, not dropped; memory is
    ``O(max_seq_len)`` in every layer).

    Attributes:
        filled: the tokens held, a 0-d int64 tensor on the cache's device (advanced in
            place by :meth:`advance`).
        started: whether a forward has written to it (the first forward and the later
            ones are the two graphs ``torch.compile`` makes).

    Shapes:
        :meth:`update` returns ``[batch, kv_heads, max_seq_len, width]`` per layer;
        :meth:`update_positions` ``[batch, max_seq_len]``.

    Example:
        >>> cache = StaticKVCache(1, 1, 1, 4, max_seq_len=8)
        >>> k, v = cache.update(0, torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4))
        >>> cache.advance(3); tuple(k.shape), int(cache.filled), int(k[0, 0, :, 0].sum())
        ((1, 1, 8, 4), 3, 3)
    """

    def __init__(self, *args, **kwargs) -> None:
        if kwargs.get("keep") is not None:
            raise ValueError("a StaticKVCache keeps every key: pass keep=None")
        super().__init__(*args, **kwargs)
        self.filled = torch.zeros((), dtype=torch.long, device=self.positions.device)
        self.started = False

    def slots(self, n: int) -> torch.Tensor:
        """The slots of ``n`` new tokens, ``filled + arange(n)``, ``[n]`` int64."""
        return self.filled + torch.arange(n, device=self.filled.device)

    def visible(self, layer: int, n: int) -> int:
        """Every slot: the ones not written yet are masked."""
        return self.max_seq_len

    def _store(self, buffer: torch.Tensor, new: torch.Tensor, layer: int) -> torch.Tensor:
        buffer.index_copy_(2, self.slots(new.shape[2]), new.to(buffer.dtype))
        return buffer

    def last_clock(self, layer: int) -> torch.Tensor | None:
        """The forget clock of ``layer``'s last written slot, ``[batch, heads, 1]``, or None
        before the first forward."""
        if not self.started or layer not in self.clocks:
            return None
        return self.clocks[layer].index_select(2, (self.filled - 1).view(1)).squeeze(-1)

    def update_positions(
        self,
        positions: torch.Tensor,
        real: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Write the new tokens' positions (``[n]`` or ``[batch, n]``, integers) at their
        slots and return every slot's, ``[batch, max_seq_len]`` (the unwritten ones are
        masked by the model). ``real`` and ``segments`` are not read: no layer rolls.

        Written by a select, not an index: a forward checks that its tokens fit
        (:meth:`check_room`) in its one read, after this write; tokens past the last slot
        are dropped until then, and ``filled`` is not advanced."""
        if positions.is_floating_point():
            raise TypeError(f"KVCache stores integer positions, got {positions.dtype}")
        n = positions.shape[-1]
        new = positions.expand(self.positions.shape[0], n).to(self.positions.dtype)
        offset = torch.arange(self.max_seq_len, device=self.filled.device) - self.filled
        inside = (offset >= 0) & (offset < n)  # [max_seq_len]: the new tokens' slots
        spread = new.index_select(1, offset.clamp(0, n - 1))  # [batch, max_seq_len]
        self.positions.copy_(torch.where(inside, spread, self.positions))
        return self.positions

    def written(self, n: int) -> torch.Tensor:
        """Which slots hold a token once ``n`` new ones are written, ``[max_seq_len]``
        bool: the padding mask of the keys."""
        return torch.arange(self.max_seq_len, device=self.filled.device) < self.filled + n

    def advance(self, n: int) -> None:
        """Count ``n`` more tokens, in place (no host read; :meth:`check_room` checks)."""
        check_int("n", n, minimum=0)
        self.filled.add_(n)
        self.started = True

    def check_room(self, n: int) -> None:
        """Raise unless ``n`` more tokens fit: a value check (:func:`~posenc.host_reads.read`,
        with a forward's other checks; skipped where values are not read)."""
        if reads_values(self.filled):
            read((self.filled + n).view(1), partial(_check_room, self.max_seq_len, n))


def _check_room(max_seq_len: int, n: int, values: list[int]) -> None:
    if values[0] > max_seq_len:
        raise ValueError(
            f"KV cache holds max_seq_len={max_seq_len} positions; {values[0] - n} are used "
            f"and {n} more do not fit"
        )
