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

from ..arguments import check_size
from ..config import check_bool, check_device, check_int
from ..host_reads import in_checked
from .cache_buffers import layer_buffers, write_joint
from .cache_checks import (
    check_cache_fits,
    check_delta,
    check_growing,
    check_joint,
    check_key_masks,
    check_new,
    check_new_positions,
    per_layer,
)

if TYPE_CHECKING:
    from ..rotary import RoPE

__all__ = ["KVCache"]

#: the sizes :class:`KVCache` takes first, in order
_SIZES = ("n_layers", "batch", "kv_heads", "head_dim", "max_seq_len")


class KVCache:
    """Keys, values and positions of every layer, preallocated for incremental decoding.

    Each forward step checks its new positions (:meth:`update_positions`), writes its new
    keys in every layer (:meth:`update`), then advances ``length`` once (:meth:`advance`),
    which stores the positions: a step refused before it leaves the cache as it was. A
    layer with ``keep[layer] = n`` returns its last ``n`` cached keys followed by the new
    ones, and then keeps only the last ``n``; the others return and keep all of them.

    Args:
        n_layers, batch, kv_heads, head_dim: the sizes of the keys and values.
        max_seq_len: the most tokens a sequence may hold.
        device, dtype: of the keys and values.
        keep: a list or tuple, per layer, of how many past keys it needs (``W - 1`` for a
            causal window of ``W``, ``C - 1`` for a chunk of ``C``), or None for all of
            them; default: all, in every layer.
        key_dims: a list or tuple, per layer, of the width of its keys as cached, after
            the encoding (PoPE's are ``2 · head_dim``); default: ``head_dim`` in every
            layer.

    Shapes:
        keys[layer]: ``[batch, kv_heads, max_seq_len | keep, key_dims[layer]]``;
        values[layer]: ``[batch, kv_heads, max_seq_len | keep, head_dim]``;
        positions: ``[batch, max_seq_len]``.

    Example:
        >>> cache = KVCache(2, 1, 1, 4, max_seq_len=100, keep=[None, 3])
        >>> [tuple(k.shape) for k in cache.keys]
        [(1, 1, 100, 4), (1, 1, 3, 4)]
    """

    #: whether a layer's keys and values share one buffer (:attr:`joint`)
    _JOINT = True

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
        keep = per_layer("keep", keep, n_layers, None, minimum=0, optional=True)
        key_dims = per_layer("key_dims", key_dims, n_layers, head_dim, minimum=1, optional=False)
        #: past keys each layer keeps (None: all), at most ``max_seq_len``
        self.keep: list[int | None] = [None if n is None or n >= max_seq_len else n for n in keep]
        size = [max_seq_len if n is None else n for n in self.keep]
        #: :attr:`joint`: per layer that keeps every key as wide as its values, one buffer
        #: ``[batch, 2 · kv_heads, max_seq_len, head_dim]`` (keys' heads first) that
        #: :attr:`keys` and :attr:`values` view and :meth:`update_joint` writes in one copy
        joinable = [self._JOINT and n is None for n in self.keep]
        buffers = layer_buffers(batch, kv_heads, head_dim, size, key_dims, joinable, device, dtype)
        self.keys, self.values, self.joint = buffers
        #: per layer with a forget clock (FoX), ``[batch, heads, max_seq_len | keep, 1]``
        self.clocks: dict[int, torch.Tensor] = {}
        #: per layer with a forget clock, the clock of its last cached token, ``[batch,
        #: heads, 1]`` (FoX's next tokens continue from it)
        self.last_clocks: dict[int, torch.Tensor] = {}
        #: every slot's position; past :attr:`length` not state, but the default count
        #: (``positions[:, i] = i``) until another is written: where the cache holds only
        #: the count, a step's positions are then there already (:meth:`count_positions`)
        slots = torch.arange(max_seq_len, device=device)
        self.positions = slots.repeat(batch, 1)  # [batch, max_seq_len]
        self.max_seq_len = max_seq_len
        self.length = 0
        #: set once positions other than the default count were cached (given, implied by
        #: a mask, shifted): attention then needs them all, and a call without positions
        #: continues from the last (:meth:`next_positions`)
        self.explicit_positions = False
        #: set once positions the caller gave (or a shift) were cached: a mask alone then
        #: implies no positions (they would restart at 0)
        self.given_positions = False
        #: the layers :meth:`update` wrote in this step: a second write of one before
        #: :meth:`advance` would overwrite the first's keys, and is refused; a step begins
        #: at :meth:`update_positions` (a forward's first call: a step that failed half way
        #: can be run again) or after :meth:`advance`
        self._updated: set[int] = set()
        #: what :meth:`update_positions` checked, stored by :meth:`advance`: the positions
        #: to store, how many tokens they are, and the flags they set
        self._pending: tuple[torch.Tensor | None, int, bool, bool] | None = None
        #: scratch, not state: the cached positions (``[:, :length]``, as
        #: :attr:`positions`) and past them the new ones :meth:`update_positions` checked
        #: last, so that it returns every position as a view, ``O(n)`` a step rather than a
        #: copy of them all; made at its first call, dropped when the cached positions move
        self._ahead: torch.Tensor | None = None

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
        layers = list(zip(self.keys, self.values, self.keep, strict=True))
        held = (self.keys[0].dtype, self.positions.device)
        check_cache_fits(layers, held, kv_heads, head_dim, key_dims, keep, dtype, device)

    def check_batch(self, batch: int) -> None:
        """Raise unless this cache holds ``batch`` sequences."""
        check_int("batch", batch)
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
        self._check_layer(layer)
        check_size("n", n, maximum=self.max_seq_len)
        keep = self.keep[layer]
        return (self.length if keep is None else min(self.length, keep)) + n

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``[batch, kv_heads, n, head_dim]`` after the cached ones and return
        the keys and values the new queries may see, ``[batch, kv_heads, visible(layer,
        n), head_dim]`` (all of them in a layer that keeps all).

        Checked against the layer's buffers, but in a model's layers
        (:func:`~posenc.host_reads.checked`): their forward checked this cache against
        them once (heads, widths, device: ``check_fits``; batch; room for the new tokens),
        so only the dtype, which autocast may change, is compared there (nothing is cast).
        """
        ours = in_checked() and type(layer) is int and 0 <= layer < len(self.keys)
        if not (ours and k.dtype == v.dtype == self.keys[layer].dtype):
            self._check_new(layer, k, v)
        self._claim(layer)
        return self._store(self.keys[layer], k, layer), self._store(self.values[layer], v, layer)

    def update_joint(self, layer: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`update` of keys and values side by side, ``kv`` ``[batch, 2 · kv_heads, n,
        head_dim]`` (the keys' heads first: a model's projection, zeroed in one pass): one
        copy into the layer's :attr:`joint` buffer in a model's layers (checked as
        :meth:`update` checks there), :meth:`update` of its halves elsewhere (a layer without
        one, a rolling one, keys or values replaced since, or a caller outside a model).

        Shapes:
            -> keys and values as :meth:`update` returns them.
        """
        both = self.joint.get(layer) if type(layer) is int else None
        if (
            both is not None
            and in_checked()
            and kv.dtype == both.dtype
            and self.keys[layer]._base is self.values[layer]._base is both
        ):
            self._claim(layer)
            self._end(kv.shape[2])  # raises where they do not fit, as update does
            return write_joint(both, kv, self.length)
        self._check_layer(layer)
        check_joint(kv, self.values[layer])
        return self.update(layer, *kv.chunk(2, dim=1))

    def _check_new(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Raise unless ``k`` and ``v`` are ``layer``'s new keys and values, of the cache's
        dtype and device, and fit (shapes only: no value is read)."""
        self._check_layer(layer)
        check_new("k", k, self.keys[layer], None, layer)
        check_new("v", v, self.values[layer], k.shape[2], layer)
        self._check_fits(k.shape[2])

    def _claim(self, layer: int) -> None:
        """Mark ``layer`` written in this step, or raise if it was (before :meth:`advance`,
        a second :meth:`update` would overwrite the first's keys). Not while compiling: a
        compiled forward writes each layer once by construction."""
        if torch.compiler.is_compiling():
            return
        if layer in self._updated:
            raise ValueError(
                f"layer {layer} was updated twice in one step: call advance(n) once every "
                "layer has its new keys (a second update would overwrite the first's)"
            )
        self._updated.add(layer)

    def _begin_step(self) -> None:
        """A new step: no layer written yet."""
        self._updated.clear()

    def _check_fits(self, n: int) -> None:
        """Raise unless ``n`` more tokens fit."""
        self._end(n)

    def _check_layer(self, layer: int) -> None:
        check_size("layer", layer, maximum=len(self.keys) - 1)

    def last_clock(self, layer: int) -> torch.Tensor | None:
        """The forget clock of ``layer``'s last cached token (FoX, :meth:`update_clock`),
        ``[batch, heads, 1]``, or None before the first."""
        self._check_layer(layer)
        return self.last_clocks.get(layer) if self.length else None

    def add_clock(self, layer: int, heads: int) -> None:
        """Make ``layer``'s buffer of forget clocks (FoX) for ``heads`` heads now, rather
        than at its first :meth:`update_clock`: float32 (float64 in a float64 cache), as
        FoX computes them. Nothing changes where it exists."""
        self._check_layer(layer)
        check_int("heads", heads)
        if layer not in self.clocks:
            keys = self.keys[layer]
            dtype = torch.float64 if keys.dtype == torch.float64 else torch.float32
            # [batch, heads, max_seq_len | keep, 1]
            self.clocks[layer] = keys.new_zeros(keys.shape[0], heads, keys.shape[2], 1, dtype=dtype)

    def update_clock(self, layer: int, clock: torch.Tensor) -> torch.Tensor:
        """Store the forget clocks ``[batch, heads, n]`` of ``layer``'s new tokens (an
        encoding with a clock of its input: FoX) and return those of the keys the new queries may
        see, ``[batch, heads, visible(layer, n)]``; the buffer is made on the first call
        (or by :meth:`add_clock`), kept as the keys are (rolling in a layer that keeps
        some)."""
        if not isinstance(clock, torch.Tensor):
            raise TypeError(f"clock must be a torch.Tensor, got {type(clock).__name__}")
        if clock.dim() != 3:
            raise ValueError(f"clock must be [batch, heads, n], got shape {tuple(clock.shape)}")
        self.add_clock(layer, clock.shape[1])
        check_new("clock", clock.unsqueeze(-1), self.clocks[layer], None, layer)
        self._keep_last_clock(layer, clock[..., -1:])
        return self._store(self.clocks[layer], clock.unsqueeze(-1), layer).squeeze(-1)

    def _keep_last_clock(self, layer: int, last: torch.Tensor) -> None:
        self.last_clocks[layer] = last  # [batch, heads, 1]

    def _store(self, buffer: torch.Tensor, new: torch.Tensor, layer: int) -> torch.Tensor:
        """Write ``new`` ``[batch, heads, n, width]`` into ``layer``'s ``buffer`` after the
        cached tokens and return the tokens the new queries may see (the kept ones and the
        new ones), ``[batch, heads, visible(layer, n), width]``."""
        n = new.shape[2]
        end = self._end(n)
        keep = self.keep[layer]
        if keep is None:
            buffer.narrow(2, self.length, n).copy_(new)
            return buffer.narrow(2, 0, end)
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
        *,
        explicit: bool = False,
        given: bool = False,
    ) -> torch.Tensor:
        """Check the new tokens' positions (``[n]`` or ``[batch, n]``, integers >= 0) and
        return all positions so far, ``[batch, length + n]``; :meth:`advance` stores them
        (a call refused before it leaves the cache as it was).

        With a rolling layer, positions must grow by at least one per token from one real
        token to the next of the same document (``real``, ``segments``: ``[batch, length +
        n]`` on the cache's device, the padding mask, bool or 0/1, and integer document
        ids, where given; checked in every cache): a window of ``W`` positions then holds
        at most the last ``W`` tokens a query may see.

        Args:
            explicit: they are not the default count (:attr:`explicit_positions`).
            given: the caller gave them (:attr:`given_positions`).
        """
        check_bool("explicit", explicit)
        check_bool("given", given)
        batch, device = self.positions.shape[0], self.positions.device
        new = check_new_positions(positions, batch, device)
        n = new.shape[-1]
        end = self._end(n)
        real, segments = check_key_masks(real, segments, batch, end, device)
        if self._ahead is None:
            self._ahead = self.positions.clone()
        self._ahead.narrow(1, self.length, n).copy_(new)  # past length: not state
        seen = self._ahead.narrow(1, 0, end)  # [batch, end]
        if self.rolling:
            start = max(self.length - 1, 0)  # the last cached token and the new ones
            linked = None
            if real is not None:
                linked = real[:, start + 1 : end] & real[:, start : end - 1]
            if segments is not None:
                same = segments[:, start + 1 : end] == segments[:, start : end - 1]
                linked = same if linked is None else linked & same
            check_growing(seen[:, start:end], linked)
        self._pending = (new, new.shape[-1], explicit, given)
        self._begin_step()
        return seen

    def count_positions(self, n: int) -> torch.Tensor:
        """:meth:`update_positions` of the default count's next ``n`` positions (``length
        .. length + n - 1`` in every row) in a cache that holds only the count (no
        :attr:`explicit_positions`): nothing to check or store, the count is in
        :attr:`positions` already. Returns every position so far, ``[batch, length + n]``.
        """
        check_size("n", n, maximum=self.max_seq_len)
        if self.explicit_positions:
            raise ValueError(
                "the cache holds explicit positions: the next ones continue from its last "
                "(next_positions), not from the count; pass them to update_positions"
            )
        end = self._end(n)
        self._pending = (None, n, False, False)
        self._begin_step()
        return self.positions.narrow(1, 0, end)

    def next_positions(self, n: int) -> torch.Tensor:
        """The positions of ``n`` tokens after the last cached one, ``[batch, n]``: what a
        call without positions continues from once the cache holds explicit ones."""
        check_size("n", n, maximum=self.max_seq_len)
        if not self.length:
            raise ValueError("the cache holds no token: there is no position to continue from")
        last = self.positions[:, self.length - 1 : self.length]  # [batch, 1]
        return last + torch.arange(1, n + 1, device=last.device)

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as filled, once every layer has been updated, and
        store the positions :meth:`update_positions` checked."""
        check_int("n", n, minimum=0)
        end = self._end(n)
        self._commit_positions(n)
        self.length = end

    def _commit_positions(self, n: int) -> None:
        """Store the positions of the last :meth:`update_positions` (``n`` of them), and
        the flags they set."""
        self._begin_step()
        pending, self._pending = self._pending, None
        if pending is None:
            return
        stored, count, explicit, given = pending
        if count != n:
            raise ValueError(f"n={n} tokens advanced, but update_positions was given {count}")
        if stored is not None:  # None: the count (count_positions), in place already
            self._store_positions(stored)
        self.explicit_positions = self.explicit_positions or explicit or given
        self.given_positions = self.given_positions or given

    def _store_positions(self, new: torch.Tensor) -> None:
        """Write the new tokens' positions ``[batch, n]`` after the cached ones."""
        self.positions.narrow(1, self.length, new.shape[-1]).copy_(new)

    def stored_keys(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys ``layer`` holds, as a view of its buffer (writable in place), and their
        positions: ``[batch, kv_heads, n, width]`` and ``[batch, n]``."""
        self._check_layer(layer)
        keep = self.keep[layer]
        if keep is None:
            return self.keys[layer][:, :, : self.length], self.positions[:, : self.length]
        kept = min(self.length, keep)  # the buffer's last `kept` slots
        keys = self.keys[layer][:, :, keep - kept :]
        return keys, self.positions[:, self.length - kept : self.length]

    def shift_positions(self, delta: int | torch.Tensor) -> None:
        """Add ``delta`` (an int, or an integer tensor ``[batch]``) to the positions of the
        cached tokens, which must stay within ``[0, 2**53]`` (a value check); they are then
        given (the next tokens' positions continue from them), unless ``delta`` is the int 0
        or no token is cached. The keys are not turned (:meth:`rerotate` does both)."""
        from .rerotate import check_moved  # the re-rotation checks the same shift

        delta = check_delta(delta, self.positions.shape[0], self.positions.device)
        check_moved(self, delta)
        self._shift_checked(delta)

    def _shift_checked(self, delta: int | torch.Tensor) -> None:
        """:meth:`shift_positions` of a ``delta`` checked already (an int or ``[1 | batch,
        1]`` int64)."""
        if (isinstance(delta, int) and delta == 0) or not self.length:
            return  # a switch of frequencies alone: the positions stay the defaults
        self.positions[:, : self.length] += delta
        self._ahead = None  # copied again at the next update_positions
        self.explicit_positions = self.given_positions = True

    def held_positions(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The positions of every slot, ``[batch, slots]``, and which hold a cached token
        (``[slots]`` bool; None: the slots are exactly the cached tokens)."""
        return self.positions[:, : self.length], None

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
            delta: the shift, an int or an integer tensor (``[]`` or one per row,
                ``[batch]``); every cached position must stay within ``[0, 2**53]``.
            layers: the layers ``rope`` rotated, each once, a list or tuple (default: all).
            seq_len, new_seq_len: ints >= 1, or None.

        Every argument is checked before a key turns: a refused call leaves the cache as
        it was.
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
