"""RoPE's cos/sin tables, computed once per device and grown by length.

A RoPE call at the default positions (none given: ``offset .. offset + seq_len - 1``)
rotates by rows of one table, ``rope_cos_sin(arange(capacity))``: computing them again at
every call (the frequencies, the float64 angles, their cos and sin) costs a dozen kernels
of host time before the rotation starts, which on a GPU is all a small call costs. Like
vLLM's ``cos_sin_cache``, the table is made once and sliced; unlike it, it is computed by
the same function from the same float64 angles as an uncached call, so a row equals what
that call computes (:func:`~posenc.functional.rope.rope_cos_sin`, elementwise).

The table lives beside its encoding, not in its ``state_dict``: ``model.to(torch.bfloat16)``
cannot round it, a checkpoint does not carry it, and :meth:`RopeTables.clear` drops it
(``RoPE._apply``, hence ``.to()``, ``.cuda()``, ``.half()``, calls it). It is keyed by the
configuration it was made for, so assigning another config makes a new one. ``torch.compile``
and ``torch.export`` and fake-tensor modes never read or fill it: they compute the rows
in their graph instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

__all__ = ["TABLE_LIMIT", "RopeTables", "WideTables", "cacheable"]

#: the most positions a table holds (``2**16``: 32 MiB of float32 cos and sin for a
#: 128-wide head); a call reaching past it computes its rows directly
TABLE_LIMIT = 1 << 16
#: the fewest rows a table is made with (growth doubles from here)
_MIN_ROWS = 64

Tables = tuple[torch.Tensor, torch.Tensor]
_FAKE = torch._C._TorchDispatchModeKey.FAKE


class WideTables(NamedTuple):
    """Rows of a table as it is kept, widened to the channels they turn
    (:func:`~posenc.functional.rope.widen_tables`): the rotation a model hands its layers
    (``RotaryEncoding._layer_rotation``), which RoPE's ``_rotate_pair`` turns q and k by
    without widening cos and sin again in every layer. Only posenc's own layers see it.

    Shapes:
        cos, sin ``[seq, 2n]``
    """

    cos: torch.Tensor
    sin: torch.Tensor


def cacheable() -> bool:
    """Whether a call may read and fill a table: outside ``torch.compile`` (whose graph
    computes the rows, fused with their use) and any fake-tensor mode (which would store
    fake tables). ``torch.jit.trace`` and ``torch.func`` transforms take the rows as the
    constants they are."""
    return not torch.compiler.is_compiling() and torch._C._get_dispatch_mode(_FAKE) is None


class RopeTables:
    """cos and sin of positions ``0 .. capacity - 1``, one pair per device."""

    def __init__(self) -> None:
        self._by_device: dict[torch.device, Tables] = {}
        self._key: object = None
        self.clear()

    def clear(self) -> None:
        """Drop every table (the next call makes them again)."""
        self._by_device = {}
        self._last: tuple[object, Tables | None] = (None, None)

    def rows(
        self,
        key: object,
        start: int,
        length: int,
        device: torch.device,
        make: Callable[[torch.Tensor], Tables],
    ) -> Tables | None:
        """Rows ``start .. start + length - 1`` of the table on ``device`` (views of it, not
        to be written), grown to fit; None when they reach past :data:`TABLE_LIMIT`.
        ``key`` is what the table depends on (the encoding's config): another key drops
        the tables made for the old one. ``make(positions)`` -> ``(cos, sin)``, each
        ``[len(positions), n]``, is the uncached computation, run on the table's positions.

        Shapes:
            returns cos, sin ``[length, n]``
        """
        end = start + length
        if end > TABLE_LIMIT:
            return None
        if key is not self._key:
            self.clear()
            self._key = key
        last = self._last
        if last[0] == (start, length, device):  # a loop of one shape: the same rows again
            return last[1]
        tables = self._by_device.get(device)
        if tables is None or tables[0].shape[0] < end:
            size = min(TABLE_LIMIT, max(_MIN_ROWS, 1 << (end - 1).bit_length()))
            # plain tensors even when the first call runs under inference_mode: a later
            # call that trains saves them for its backward
            with torch.inference_mode(False), torch.no_grad():
                positions = torch.arange(size, device=device)
                tables = make(positions)
            self._by_device[device] = tables
        cos, sin = tables
        found = cos[start:end], sin[start:end]
        self._last = ((start, length, device), found)
        return found
