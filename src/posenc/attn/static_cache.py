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

from collections.abc import Sequence
from functools import partial

import torch

from ..arguments import check_size
from ..config import check_bool, check_int
from ..host_reads import read, reads_values
from .cache import KVCache
from .cache_checks import check_growing, check_key_masks, check_new_positions

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
        host_filled: the tokens held as the host counted them (the sum of the calls'
            lengths: a shape fact, no read), or None once a compiled call advanced the
            cache or a :class:`~posenc.models.DecodeStep` took its tensors (the count is
            then in :attr:`filled` alone; set it to None too before changing ``filled``
            by hand). Where known, a call that does not fit is refused from it, even with
            validation off; else by the forward's read.
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

    #: every buffer its own tensor: the Triton kernel that writes rotated keys and the
    #: exported program's state take them contiguous
    _JOINT = False

    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        max_seq_len: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        keep: Sequence[int | None] | None = None,
        key_dims: Sequence[int] | None = None,
    ) -> None:
        super().__init__(
            n_layers,
            batch,
            kv_heads,
            head_dim,
            max_seq_len,
            device=device,
            dtype=dtype,
            keep=keep,
            key_dims=key_dims,
        )
        device = self.positions.device
        self.filled = torch.zeros((), dtype=torch.long, device=device)
        self.started = False
        self.host_filled: int | None = 0
        self._pending_rings: list[tuple[torch.Tensor, torch.Tensor]] = []
        batch = self.positions.shape[0]
        sizes = sorted({n for n in self.keep if n is not None})
        self.ring_positions = {n: self.positions.new_zeros(batch, n) for n in sizes}
        self.ring_real = {n: torch.zeros(batch, n, dtype=torch.bool, device=device) for n in sizes}
        for t in self.tensors():
            _mark_static(t)

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor this cache holds and a step writes in place: keys, values, forget
        clocks and their last, positions, the count, the rings' positions and flags. Each
        keeps its address for the cache's life, and is marked so
        (``torch._dynamo.mark_static_address``, unguarded): a CUDA graph of a decode step
        (``torch.compile(mode="reduce-overhead")``) replays its writes in place rather
        than being skipped for mutating its inputs, and a new cache is re-recorded, not
        recompiled."""
        return [
            *self.keys,
            *self.values,
            *self.clocks.values(),
            *self.last_clocks.values(),
            self.positions,
            self.filled,
            *self.ring_positions.values(),
            *self.ring_real.values(),
        ]

    def slots(self, n: int) -> torch.Tensor:
        """The slots of ``n`` new tokens, ``filled + arange(n)``, ``[n]`` int64."""
        check_size("n", n, maximum=self.max_seq_len)
        return self.filled + torch.arange(n, device=self.filled.device)

    def visible(self, layer: int, n: int) -> int:
        """Every slot (the ones not written yet are masked), or a ring and the new ones."""
        self._check_layer(layer)
        check_size("n", n, maximum=self.max_seq_len)
        ring = self.keep[layer]
        return self.max_seq_len if ring is None else ring + n

    def _check_fits(self, n: int) -> None:
        self.check_room(n)

    def _store(self, buffer: torch.Tensor, new: torch.Tensor, layer: int) -> torch.Tensor:
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
        if not isinstance(rotation, tuple) or len(rotation) != 2:
            got = type(rotation).__name__
            raise TypeError(f"rotation must be RoPE's (cos, sin) pair, got {got}")
        if self.keep[layer] is not None:
            raise ValueError(f"layer {layer} keeps a ring: update_rotated writes full layers")
        self._claim(layer)
        from ..functional.rope_triton import rope_cache_write  # Triton at the first use

        keys, values = self.keys[layer], self.values[layer]
        cos, sin = rotation
        q = rope_cache_write(q, k, v, cos, sin, keys, values, self.slots(k.shape[2]), layout)
        return q, keys, values

    def stored_keys(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every slot of ``layer`` (the unwritten ones are zeros, which no rotation moves)
        and their positions: ``[batch, kv_heads, slots, width]``, ``[batch, slots]``."""
        self._check_layer(layer)
        ring = self.keep[layer]
        if ring is None:
            return self.keys[layer], self.positions
        return self.keys[layer], self.ring_positions[ring]

    def _shift_checked(self, delta: int | torch.Tensor) -> None:
        """Add ``delta`` (an int, or ``[1 | batch, 1]``, checked) to the position of every
        written slot (rings too; no host read): the unwritten ones stay 0."""
        if (isinstance(delta, int) and delta == 0) or not self.started:
            return
        slots = torch.arange(self.max_seq_len, device=self.filled.device)
        zero = torch.zeros((), dtype=torch.long, device=self.filled.device)
        shift = torch.as_tensor(delta, device=self.filled.device)
        self.positions += torch.where(slots < self.filled, shift, zero)  # [batch, max_seq_len]
        for size, ring in self.ring_positions.items():  # slot j written once filled > j
            ring += torch.where(slots[:size] < self.filled, shift, zero)  # [batch, size]
        self.explicit_positions = self.given_positions = True

    def held_positions(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every slot's position, ``[batch, max_seq_len]``, and which slots hold a token."""
        return self.positions, self.written(0)

    def next_positions(self, n: int) -> torch.Tensor:
        """The positions of ``n`` tokens after the last written slot's, ``[batch, n]`` (no
        host read)."""
        check_size("n", n, maximum=self.max_seq_len)
        last = self.positions.index_select(1, (self.filled - 1).clamp(min=0).view(1))
        return last + torch.arange(1, n + 1, device=last.device)  # [batch, n]

    def _write_ring(self, ring: torch.Tensor, new: torch.Tensor, dim: int) -> None:
        """The last of ``new``'s tokens (along ``dim``) into their slots of ``ring``."""
        size, n = ring.shape[dim], new.shape[dim]
        if size == 0:
            return
        last = min(size, n)
        slots = (self.slots(n)[n - last :]) % size
        ring.index_copy_(dim, slots, new.narrow(dim, n - last, last))

    def last_clock(self, layer: int) -> torch.Tensor | None:
        """The forget clock of ``layer``'s last written token, ``[batch, heads, 1]``, or
        None before the first forward."""
        self._check_layer(layer)
        if not self.started or layer not in self.last_clocks:
            return None
        return self.last_clocks[layer]

    def add_clock(self, layer: int, heads: int) -> None:
        """:meth:`KVCache.add_clock`, and the buffer of the last token's clock (written in
        place, so that the clocks are all buffers: :class:`~posenc.models.DecodeStep`)."""
        super().add_clock(layer, heads)
        if layer not in self.last_clocks:
            clocks = self.clocks[layer]  # [batch, heads, slots, 1]; a ring may have none
            self.last_clocks[layer] = clocks.new_zeros(clocks.shape[0], heads, 1)
            _mark_static(clocks)
            _mark_static(self.last_clocks[layer])

    def _keep_last_clock(self, layer: int, last: torch.Tensor) -> None:
        self.last_clocks[layer].copy_(last)  # [batch, heads, 1], made by add_clock

    def ring_keys(
        self, positions: torch.Tensor, real: torch.Tensor
    ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Per ring size, the positions and the padding mask of the keys its layers see in
        this call (the ring before it, then the ``n`` new tokens: ``[batch, size + n]``);
        :meth:`advance` writes the new tokens into the rings.

        Args:
            positions: the new tokens' positions, ``[batch, n]`` integers.
            real: whether each new token is real (not a pad), ``[batch, n]`` bool.
        """
        batch, device = self.positions.shape[0], self.positions.device
        positions = check_new_positions(positions, batch, device)
        if not isinstance(real, torch.Tensor) or real.dtype != torch.bool:
            got = real.dtype if isinstance(real, torch.Tensor) else type(real).__name__
            raise TypeError(f"real must be a bool tensor, got {got}")
        if real.shape != positions.shape or real.device != device:
            raise ValueError(
                f"real must be [batch, n] = {list(positions.shape)} on {device}, got shape "
                f"{tuple(real.shape)} on {real.device}"
            )
        seen = {}
        self._pending_rings = []
        for size, ring in self.ring_positions.items():
            present = self.ring_real[size]
            seen[size] = (torch.cat((ring, positions), 1), torch.cat((present, real), 1))
            self._pending_rings += [(ring, positions.to(ring.dtype)), (present, real)]
        return seen

    def update_positions(
        self,
        positions: torch.Tensor,
        real: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        *,
        explicit: bool = False,
        given: bool = False,
    ) -> torch.Tensor:
        """Check the new tokens' positions (``[n]`` or ``[batch, n]``, integers >= 0) and
        return every slot's with them at their slots, ``[batch, max_seq_len]`` (the
        unwritten ones are masked by the model); :meth:`advance` stores them.

        With a ring (a window or chunk layer), positions must grow by at least one per
        token from the last written one, between real tokens (``real``: ``[batch,
        max_seq_len]``, the padding mask of every slot, bool or 0/1, where given);
        ``segments`` are not taken (documents are refused). A select, not an index: tokens
        past the last slot are left out until the forward's read refuses them
        (:meth:`check_room`)."""
        check_bool("explicit", explicit)
        check_bool("given", given)
        if segments is not None:
            raise ValueError("segments are not supported with a StaticKVCache: use a KVCache")
        batch, device = self.positions.shape[0], self.positions.device
        new = check_new_positions(positions, batch, device)
        real = check_key_masks(real, None, batch, self.max_seq_len, device)[0]
        n = new.shape[-1]
        self.check_room(n)
        offset = torch.arange(self.max_seq_len, device=self.filled.device) - self.filled
        inside = (offset >= 0) & (offset < n)  # [max_seq_len]: the new tokens' slots
        spread = new.index_select(1, offset.clamp(0, max(n - 1, 0)))  # [batch, max_seq_len]
        merged = torch.where(inside, spread, self.positions)
        if self.ring_positions:
            self._check_growing(new, real)
        self._pending = (merged, n, explicit, given)
        self._begin_step()
        return merged

    def count_positions(self, n: int) -> torch.Tensor:
        """:meth:`update_positions` of the default count's next ``n`` positions, which
        here are the slots they are written to (:meth:`slots`)."""
        check_size("n", n, maximum=self.max_seq_len)
        return self.update_positions(self.slots(n))

    def _check_growing(self, new: torch.Tensor, real: torch.Tensor | None) -> None:
        """Raise unless ``new`` ``[batch, n]`` grow from the last written token's position
        on, between real tokens (a value check, skipped where values are not read)."""
        if not reads_values(new, self.filled):
            return
        last = (self.filled - 1).clamp(min=0).view(1)
        slots = torch.cat((last, self.slots(new.shape[-1]).clamp(max=self.max_seq_len - 1)))
        chain = torch.cat((self.positions.index_select(1, last), new), 1)  # [batch, n + 1]
        linked = torch.ones_like(chain[:, 1:], dtype=torch.bool)
        linked[:, 0] = self.filled > 0  # the first new token follows a written one
        if real is not None:
            present = real.index_select(1, slots)
            linked = linked & present[:, 1:] & present[:, :-1]
        check_growing(chain, linked)

    def _store_positions(self, new: torch.Tensor) -> None:
        self.positions.copy_(new)  # [batch, max_seq_len], as update_positions merged them

    def written(self, n: int) -> torch.Tensor:
        """Which slots hold a token once ``n`` new ones are written, ``[max_seq_len]``
        bool: the padding mask of the keys."""
        check_size("n", n, maximum=self.max_seq_len)
        return torch.arange(self.max_seq_len, device=self.filled.device) < self.filled + n

    def advance(self, n: int) -> None:
        """Count ``n`` more tokens, in place, and store their positions (and the rings')
        (no host read; :meth:`check_room` checks)."""
        check_int("n", n, minimum=0)
        self._room_known(n)
        self._commit_positions(n)
        rings, self._pending_rings = self._pending_rings, []
        for ring, new in rings:
            self._write_ring(ring, new, 1)
        self.filled.add_(n)
        self.started = True
        if torch.compiler.is_compiling():
            self.host_filled = None  # a compiled graph's count lives in `filled` alone
        elif self.host_filled is not None:
            self.host_filled += n

    def check_room(self, n: int) -> None:
        """Raise unless ``n`` more tokens fit: from the shapes (``n`` against
        ``max_seq_len``; the count :attr:`host_filled`, where known and not compiling),
        else a value check (:func:`~posenc.host_reads.read`, with a forward's other
        checks; skipped where values are not read)."""
        check_size("n", n)
        if not self._room_known(n) and reads_values(self.filled):
            read((self.filled + n).view(1), partial(_check_room, self.max_seq_len, n))

    def _room_known(self, n: int) -> bool:
        """Raise where the shapes tell that ``n`` more tokens do not fit; whether they
        tell all (the count is known on the host)."""
        if not torch.compiler.is_compiling() and self.host_filled is not None:
            _check_room(self.max_seq_len, n, [self.host_filled + n])
            return True
        if n > self.max_seq_len:
            raise ValueError(
                f"KV cache holds max_seq_len={self.max_seq_len} positions; {n} new tokens "
                "do not fit"
            )
        return False


def _mark_static(t: torch.Tensor) -> None:
    """Mark ``t`` as an input whose address never changes (see
    :meth:`StaticKVCache.tensors`); unguarded: a compiled step is not recompiled for
    another cache's tensors."""
    torch._dynamo.mark_static_address(t, guard=False)


def _check_room(max_seq_len: int, n: int, values: list[int]) -> None:
    if values[0] > max_seq_len:
        raise ValueError(
            f"KV cache holds max_seq_len={max_seq_len} positions; {values[0] - n} are used "
            f"and {n} more do not fit"
        )
