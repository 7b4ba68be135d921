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

A layer that needs only its last ``n`` keys (a window of ``n + 1``, a chunk of ``n + 1``)
keeps a ring of ``n`` slots: token ``t`` lives in slot ``t % n``, and a call sees the
ring as it was before the call followed by its new tokens, ``n + seq`` keys, then writes
the last of them into the ring. Its memory is ``O(W)`` whatever the length (the rolling
buffer of Mistral 7B, Jiang et al. 2023, arXiv:2310.06825), with fixed shapes.
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

    Takes :class:`~posenc.attn.KVCache`'s arguments. A layer with ``keep[layer] = n``
    keeps a ring of its last ``n`` tokens' keys (see the module); the others every key.

    Attributes:
        filled: the tokens held, a 0-d int64 tensor on the cache's device (advanced in
            place by :meth:`advance`).
        started: whether a forward has written to it (the first forward and the later
            ones are the two graphs ``torch.compile`` makes).
        ring_positions, ring_real: per ring size ``n``, the position of the token in each
            slot and whether it is a real token (not a pad, not unwritten yet), ``[batch,
            n]``; every ring of one size holds the same tokens in the same slots.

    Shapes:
        :meth:`update` returns ``[batch, kv_heads, max_seq_len, width]`` per layer that
        keeps every key, ``[batch, kv_heads, n + seq, width]`` per ring of ``n``;
        :meth:`update_positions` ``[batch, max_seq_len]``.

    Example:
        >>> cache = StaticKVCache(1, 1, 1, 4, max_seq_len=8)
        >>> k, v = cache.update(0, torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4))
        >>> cache.advance(3); tuple(k.shape), int(cache.filled), int(k[0, 0, :, 0].sum())
        ((1, 1, 8, 4), 3, 3)
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        device = self.positions.device
        self.filled = torch.zeros((), dtype=torch.long, device=device)
        self.started = False
        batch = self.positions.shape[0]
        sizes = sorted({n for n in self.keep if n is not None})
        self.ring_positions = {n: self.positions.new_zeros(batch, n) for n in sizes}
        self.ring_real = {n: torch.zeros(batch, n, dtype=torch.bool, device=device) for n in sizes}

    def slots(self, n: int) -> torch.Tensor:
        """The slots of ``n`` new tokens, ``filled + arange(n)``, ``[n]`` int64."""
        return self.filled + torch.arange(n, device=self.filled.device)

    def visible(self, layer: int, n: int) -> int:
        """Every slot (the ones not written yet are masked), or a ring and the new ones."""
        ring = self.keep[layer]
        return self.max_seq_len if ring is None else ring + n

    def _store(self, buffer: torch.Tensor, new: torch.Tensor, layer: int) -> torch.Tensor:
        new = new.to(buffer.dtype)
        ring = self.keep[layer]
        if ring is None:
            buffer.index_copy_(2, self.slots(new.shape[2]), new)
            return buffer
        seen = torch.cat((buffer, new), dim=2)  # the ring before this call, then the new
        self._write_ring(buffer, new, 2)
        return seen

    def update_rotated(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        rotation: tuple[torch.Tensor, torch.Tensor],
        layout: str,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`update` for keys not rotated yet: RoPE's ``rotation`` (``(cos, sin)``)
        turns ``q`` and ``k``, and the keys and ``v`` are written into their slots, in one
        Triton launch (:func:`~posenc.functional.rope_triton.rope_cache_write`; vLLM's
        and FlashInfer's "RoPE + KV append"). A layer that keeps every key; no gradient.

        Returns:
            ``(q, keys, values)``: q rotated, and :meth:`update`'s keys and values.
        """
        self._check_new(layer, k, v)
        if self.keep[layer] is not None:
            raise ValueError(f"layer {layer} keeps a ring: update_rotated writes full layers")
        from ..functional.rope_triton import rope_cache_write  # Triton at the first use

        keys, values = self.keys[layer], self.values[layer]
        cos, sin = rotation
        q = rope_cache_write(q, k, v, cos, sin, keys, values, self.slots(k.shape[2]), layout)
        return q, keys, values

    def stored_keys(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every slot of ``layer`` (the unwritten ones are zeros, which no rotation moves)
        and their positions: ``[batch, kv_heads, slots, width]``, ``[batch, slots]``."""
        ring = self.keep[layer]
        if ring is None:
            return self.keys[layer], self.positions
        return self.keys[layer], self.ring_positions[ring]

    def shift_positions(self, delta: int | torch.Tensor) -> None:
        """Add ``delta`` to every slot's position (rings too; no host read)."""
        if isinstance(delta, int) and delta == 0:
            return
        self.positions += delta
        for ring in self.ring_positions.values():
            ring += delta
        self.explicit_positions = True

    def _write_ring(self, ring: torch.Tensor, new: torch.Tensor, dim: int) -> None:
        """The last of ``new``'s tokens (along ``dim``) into their slots of ``ring``."""
        size, n = ring.shape[dim], new.shape[dim]
        if size == 0:
            return
        last = min(size, n)
        slots = (self.slots(n)[n - last :]) % size
        ring.index_copy_(dim, slots, new.narrow(dim, n - last, last))

    def last_clock(self, layer: int) -> torch.Tensor | None:
        """The forget clock of ``layer``'s last written slot, ``[batch, heads, 1]``, or None
        before the first forward."""
        if not self.started or layer not in self.clocks:
            return None
        ring = self.keep[layer]
        if ring == 0:  # a ring of no slot: the last clock is kept apart
            return self._last_clock[layer]
        last = self.filled - 1 if ring is None else (self.filled - 1) % ring
        return self.clocks[layer].index_select(2, last.view(1)).squeeze(-1)

    def ring_keys(
        self, positions: torch.Tensor, real: torch.Tensor
    ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Per ring size, the positions and the padding mask of the keys its layers see in
        this call (the ring before it, then the ``n`` new tokens: ``[batch, size + n]``),
        then the new tokens written into the ring.

        Args:
            positions: the new tokens' positions, ``[batch, n]`` integers.
            real: whether each new token is real (not a pad), ``[batch, n]`` bool.
        """
        seen = {}
        for size, ring in self.ring_positions.items():
            present = self.ring_real[size]
            seen[size] = (torch.cat((ring, positions), 1), torch.cat((present, real), 1))
            self._write_ring(ring, positions.to(ring.dtype), 1)
            self._write_ring(present, real, 1)
        return seen

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
