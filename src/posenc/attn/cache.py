"""A key/value cache for incremental decoding that keeps, per layer, only what its
attention can still see.

Rotary encodings rotate keys before they are cached, so cached keys keep the rotation of
their own position; the cache also keeps each token's position (integers, every token),
for bias encodings and the masks of the next steps, and, in a FoX layer, each token's
forget clock per head (the next tokens' clocks continue from the last one).

A layer with a sliding window of ``W`` (or a chunk of ``C``) keeps a rolling buffer of its
last ``W - 1`` (``C - 1``) keys and values: no later query can see an older one, as long
as positions grow by at least one per token (checked), so its memory is ``O(W)`` whatever
the length (Mistral 7B's rolling buffer cache, Jiang et al. 2023, arXiv:2310.06825). The
other layers keep every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from ..config import check_device, check_int
from ..host_reads import read, reads_values

if TYPE_CHECKING:
    from ..rotary import RoPE

__all__ = ["KVCache"]

#: the sizes :class:`KVCache` takes first, in order
_SIZES = ("n_layers", "batch", "kv_heads", "head_dim", "max_seq_len")


class KVCache:
    """Keys, values and positions of every layer, preallocated for incremental decoding.

    Each forward step writes its new keys in every layer (:meth:`update`), then advances
    ``length`` once (:meth:`advance`). A layer with ``keep[layer] = n`` returns its last
    ``n`` cached keys followed by the new ones, and then keeps only the last ``n``; the
    others return and keep all of them.

    Args:
        n_layers, batch, kv_heads, head_dim: the sizes of the keys and values.
        max_seq_len: the most tokens a sequence may hold.
        device, dtype: of the keys and values.
        keep: per layer, how many past keys it needs (``W - 1`` for a causal window of
            ``W``, ``C - 1`` for a chunk of ``C``), or None for all of them; default: all,
            in every layer.
        key_dims: per layer, the width of its keys as cached, after the encoding (PoPE's
            are ``2 · head_dim``); default: ``head_dim`` in every layer.

    Shapes:
        keys[layer]: ``[batch, kv_heads, max_seq_len | keep, key_dims[layer]]``;
        values[layer]: ``[batch, kv_heads, max_seq_len | keep, head_dim]``;
        positions: ``[batch, max_seq_len]``.

    Example:
        >>> cache = KVCache(2, 1, 1, 4, max_seq_len=100, keep=[None, 3])
        >>> [tuple(k.shape) for k in cache.keys]
        [(1, 1, 100, 4), (1, 1, 3, 4)]
    """

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
        sizes = (n_layers, batch, kv_heads, head_dim, max_seq_len)
        for name, value in zip(_SIZES, sizes, strict=True):
            check_int(name, value)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        device = check_device(device)
        keep = [None] * n_layers if keep is None else list(keep)
        if len(keep) != n_layers:
            raise ValueError(f"keep must give one entry per layer ({n_layers}), got {len(keep)}")
        key_dims = [head_dim] * n_layers if key_dims is None else list(key_dims)
        if len(key_dims) != n_layers:
            raise ValueError(
                f"key_dims must give one entry per layer ({n_layers}), got {len(key_dims)}"
            )
        for i, width in enumerate(key_dims):
            check_int(f"key_dims[{i}]", width)
        for i, n in enumerate(keep):
            if n is not None:
                check_int(f"keep[{i}]", n, minimum=0)
        #: past keys each layer keeps (None: all), at most ``max_seq_len``
        self.keep: list[int | None] = [None if n is None or n >= max_seq_len else n for n in keep]
        size = [max_seq_len if n is None else n for n in self.keep]
        self.keys = [
            torch.zeros(batch, kv_heads, n, width, device=device, dtype=dtype)
            for n, width in zip(size, key_dims, strict=True)
        ]
        self.values = [
            torch.zeros(batch, kv_heads, n, head_dim, device=device, dtype=dtype) for n in size
        ]
        #: per layer with a forget clock (FoX), ``[batch, heads, max_seq_len | keep, 1]``
        self.clocks: dict[int, torch.Tensor] = {}
        self._last_clock: dict[int, torch.Tensor] = {}  # [batch, heads, 1]
        self.positions = torch.zeros(batch, max_seq_len, device=device, dtype=torch.long)
        self.max_seq_len = max_seq_len
        self.length = 0
        #: set once explicit positions were cached: attention then needs them all
        self.explicit_positions = False

    @property
    def rolling(self) -> bool:
        """Whether a layer keeps only some of its keys."""
        return any(n is not None for n in self.keep)

    def check_fits(
        self,
        *,
        kv_heads: int,
        head_dim: int,
        key_dims: Sequence[int],
        keep: Sequence[int | None],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        """Raise a ValueError naming what differs unless this cache fits a model whose
        layers have ``kv_heads`` heads of keys ``key_dims[layer]`` wide and values
        ``head_dim`` wide, in ``dtype`` on ``device``, and need their last ``keep[layer]``
        past keys (None: all of them). Shapes only: no value is read."""
        fix = "make one with model.new_cache(batch, max_seq_len)"
        if len(self.keys) != len(key_dims):
            raise ValueError(
                f"cache has n_layers={len(self.keys)} but the model has {len(key_dims)}: {fix}"
            )
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            got = (k.shape[1], k.shape[-1], v.shape[-1])
            if got != (kv_heads, key_dims[i], head_dim):
                raise ValueError(
                    f"cache layer {i} holds kv_heads={got[0]}, key width {got[1]} and "
                    f"head_dim={got[2]}, but the model's layer {i} has kv_heads={kv_heads}, "
                    f"key width {key_dims[i]} and head_dim={head_dim}: {fix}"
                )
            kept, needed = self.keep[i], keep[i]
            if kept is not None and (needed is None or kept < needed):
                raise ValueError(
                    f"cache layer {i} keeps its last {kept} keys but the model's layer {i} "
                    f"needs {'all of them' if needed is None else f'its last {needed}'}: {fix}"
                )
        if self.keys[0].dtype != dtype or self.positions.device != device:
            raise ValueError(
                f"cache holds {self.keys[0].dtype} on {self.positions.device} but the model is "
                f"{dtype} on {device}: {fix}"
            )

    def check_batch(self, batch: int) -> None:
        """Raise unless this cache holds ``batch`` sequences."""
        if self.positions.shape[0] != batch:
            raise ValueError(
                f"cache holds {self.positions.shape[0]} sequences but input_ids has {batch}: "
                "make one with model.new_cache(batch, max_seq_len)"
            )

    def _end(self, n: int) -> int:
        end = self.length + n
        if end > self.max_seq_len:
            raise ValueError(
                f"KV cache holds max_seq_len={self.max_seq_len} positions; "
                f"{self.length} are used and {n} more do not fit"
            )
        return end

    def visible(self, layer: int, n: int) -> int:
        """How many keys :meth:`update` of ``layer`` returns with ``n`` new ones: the last
        of them, the new tokens' keys included."""
        keep = self.keep[layer]
        return (self.length if keep is None else min(self.length, keep)) + n

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``[batch, kv_heads, n, head_dim]`` after the cached ones and return
        the keys and values the new queries may see, ``[batch, kv_heads, visible(layer,
        n), head_dim]`` (all of them in a layer that keeps all)."""
        self._check_new(layer, k, v)
        return self._store(self.keys[layer], k, layer), self._store(self.values[layer], v, layer)

    def _check_new(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Raise unless ``k`` and ``v`` are ``layer``'s new keys and values."""
        check_int("layer", layer, minimum=0, maximum=len(self.keys) - 1)
        for name, new, buffer in (("k", k, self.keys[layer]), ("v", v, self.values[layer])):
            b, h, _, width = buffer.shape
            if not isinstance(new, torch.Tensor) or new.dim() != 4:
                raise ValueError(
                    f"{name} must be a [batch, kv_heads, n, width] tensor, got {new!r}"
                )
            if (new.shape[0], new.shape[1], new.shape[3], new.shape[2]) != (
                b,
                h,
                width,
                k.shape[2],
            ):
                raise ValueError(
                    f"{name} must be [batch={b}, kv_heads={h}, n, {width}] (n as k's) for "
                    f"layer {layer} of this cache, got {tuple(new.shape)}"
                )

    def last_clock(self, layer: int) -> torch.Tensor | None:
        """The forget clock of ``layer``'s last cached token (FoX, :meth:`update_clock`),
        ``[batch, heads, 1]``, or None before the first."""
        return self._last_clock.get(layer) if self.length else None

    def update_clock(self, layer: int, clock: torch.Tensor) -> torch.Tensor:
        """Store the forget clocks ``[batch, heads, n]`` of ``layer``'s new tokens (an
        encoding with a clock of its input: FoX) and return those of the keys the new queries may
        see, ``[batch, heads, visible(layer, n)]``; the buffer is made on the first call,
        kept as the keys are (rolling in a layer that keeps some)."""
        if layer not in self.clocks:
            b, h = clock.shape[:2]
            size = self.keys[layer].shape[2]  # max_seq_len, or the kept keys
            self.clocks[layer] = clock.new_zeros(b, h, size, 1)  # [b, h, size, 1]
        self._last_clock[layer] = clock[..., -1:]
        return self._store(self.clocks[layer], clock.unsqueeze(-1), layer).squeeze(-1)

    def _store(self, buffer: torch.Tensor, new: torch.Tensor, layer: int) -> torch.Tensor:
        """Write ``new`` ``[batch, heads, n, width]`` into ``layer``'s ``buffer`` after the
        cached tokens and return the tokens the new queries may see (the kept ones and the
        new ones), ``[batch, heads, visible(layer, n), width]``."""
        n = new.shape[2]
        end = self._end(n)
        keep = self.keep[layer]
        if keep is None:
            buffer[:, :, self.length : end] = new
            return buffer[:, :, :end]
        kept = min(self.length, keep)  # the buffer's last `kept` slots hold them
        seen = torch.cat((buffer[:, :, keep - kept :], new), dim=2)
        m = min(keep, seen.shape[2])
        if m:
            buffer[:, :, keep - m :] = seen[:, :, -m:]
        return seen

    def update_positions(
        self,
        positions: torch.Tensor,
        real: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Store the new tokens' positions (``[n]`` or ``[batch, n]``, integers) and return
        all positions so far, ``[batch, length + n]``.

        With a rolling layer, positions must grow by at least one per token from one real
        token to the next of the same document (``real``, ``segments``: ``[batch, length +
        n]``, the padding mask and document ids, where given): a window of ``W`` positions
        then holds at most the last ``W`` tokens a query may see.
        """
        if positions.is_floating_point():
            raise TypeError(f"KVCache stores integer positions, got {positions.dtype}")
        end = self._end(positions.shape[-1])
        self.positions[:, self.length : end] = positions
        if self.rolling:
            start = max(self.length - 1, 0)  # the last cached token and the new ones
            linked = None
            if real is not None:
                linked = real[:, start + 1 : end] & real[:, start : end - 1]
            if segments is not None:
                same = segments[:, start + 1 : end] == segments[:, start : end - 1]
                linked = same if linked is None else linked & same
            _check_growing(self.positions[:, start:end], linked)
        return self.positions[:, :end]

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as filled, once every layer has been updated."""
        check_int("n", n, minimum=0)
        self.length = self._end(n)

    def stored_keys(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys ``layer`` holds, as a view of its buffer (writable in place), and their
        positions: ``[batch, kv_heads, n, width]`` and ``[batch, n]``."""
        keep = self.keep[layer]
        if keep is None:
            return self.keys[layer][:, :, : self.length], self.positions[:, : self.length]
        kept = min(self.length, keep)  # the buffer's last `kept` slots
        keys = self.keys[layer][:, :, keep - kept :]
        return keys, self.positions[:, self.length - kept : self.length]

    def shift_positions(self, delta: int | torch.Tensor) -> None:
        """Add ``delta`` (an int, or ``[batch, 1]``) to the positions of the cached tokens;
        they are then explicit (the next tokens' positions must continue from them), unless
        ``delta`` is the int 0."""
        if isinstance(delta, int) and delta == 0:
            return  # a switch of frequencies alone: the positions stay the defaults
        self.positions[:, : self.length] += delta
        self.explicit_positions = True

    def rerotate(
        self,
        rope: RoPE,
        *,
        delta: int | torch.Tensor = 0,
        to: RoPE | None = None,
        layers: Sequence[int] | None = None,
        seq_len: int | None = None,
        new_seq_len: int | None = None,
    ) -> None:
        """Turn the cached keys, rotated by ``rope`` at their positions, into what ``to``
        (default: ``rope``) gives at their positions + ``delta``, in place, and shift the
        cached positions by ``delta``: a cache shifted or reused at another offset, or a
        switch of frequencies (LongRoPE's short to long factors: ``seq_len`` and
        ``new_seq_len`` are the lengths each rotation was chosen at), without recomputing
        the keys (:mod:`posenc.functional.rope_rerotate`).

        Args:
            rope, to: :class:`~posenc.rotary.RoPE` encodings (M-RoPE's text positions,
                p-RoPE too) of one layout and rotary width.
            delta: the shift, an int or one per row (``[batch]``).
            layers: the layers ``rope`` rotated (default: all).
        """
        from .rerotate import rerotate_cache  # the re-rotation's checks and math

        rerotate_cache(self, rope, delta, to, layers, seq_len, new_seq_len)

    def memory(self) -> list[int]:
        """The bytes of keys and values (and forget clocks) each layer holds."""
        tensors = [
            [k, v, *([self.clocks[i]] if i in self.clocks else [])]
            for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True))
        ]
        return [sum(t.numel() * t.element_size() for t in layer) for layer in tensors]


def _check_growing(positions: torch.Tensor, linked: torch.Tensor | None) -> None:
    """Raise unless ``positions`` ``[batch, n]`` grow from each token to the next where
    ``linked`` ``[batch, n - 1]`` (None: everywhere)."""
    if positions.shape[-1] < 2:
        return
    if not reads_values(positions):
        return
    grows = positions.diff(dim=-1) > 0
    if linked is not None:
        grows = grows | ~linked
    read(grows.all().view(1), _check_grows)


def _check_grows(values: list[int]) -> None:
    if not values[0]:
        raise ValueError(
            "a rolling cache (a layer with a window or chunk keeps only its last keys) needs "
            "positions that grow by at least one per token within a document; these do not: "
            "build the cache with keep=None to keep every key"
        )
