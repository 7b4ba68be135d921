"""The check of what ``rotate(x, rotation, key)`` takes, shared by the rotary encodings
(RoPE's family with its ``(cos, sin)``, xPos's ``scale`` beside them, FoPE, PoPE, the grid
RoPEs; ``seq_len`` is checked by :func:`posenc.rotary.rope.check_seq_len`).

It reads shapes, dtypes and devices only (no tensor value), so it costs nothing beside
the rotation itself and runs on every call of every layer.
"""

from __future__ import annotations

from typing import Any

import torch

from ..base import RotaryEncoding
from ..base.encoding import check_float_tensor
from ..config import check_bool

__all__ = ["check_rotate"]


def check_rotate(
    encoding: RotaryEncoding,
    x: Any,
    rotation: Any,
    key: Any,
    *,
    width: int,
    heads: tuple[int | None, ...],
) -> tuple[torch.Tensor, ...]:
    """``rotation``'s tables once ``rotate(x, rotation, key)`` of ``encoding`` is checked,
    else a ``TypeError``/``ValueError`` naming the argument: ``x`` a floating-point
    ``[batch, heads, seq, head_dim]`` on the encoding's device, ``key`` a bool, and
    ``rotation`` a tuple (or list) of the floating-point tables that
    ``encoding.rotation()`` returns for ``x``'s positions, on ``x``'s device: one per entry
    of ``heads``, an int for a table per head, None for one that every head shares.

    Shapes:
        x ``[batch, heads, seq, head_dim]``; a table per head ``[batch or 1, h, seq,
        width]`` (``h`` its entry of ``heads``), a shared one ``[seq, width]`` or
        ``[batch or 1, seq, width]``.
    """
    encoding._check_heads("x", x)
    check_bool("key", key)
    name = type(encoding).__name__
    if not isinstance(rotation, (tuple, list)):
        raise TypeError(
            f"rotation must be the tuple that {name}.rotation(positions) returns, got "
            f"{type(rotation).__name__}"
        )
    if len(rotation) != len(heads):
        raise ValueError(
            f"rotation must be the {len(heads)} tables that {name}.rotation(positions) "
            f"returns, got {len(rotation)}"
        )
    batch, seq, device = x.shape[0], x.shape[2], x.device
    for t, h in zip(rotation, heads, strict=True):
        check_float_tensor("rotation's tables", t)
        if not _fits(t.shape, batch, h, seq, width):
            shapes = " and ".join(
                f"[seq, {width}] or [batch or 1, seq, {width}]"
                if h is None
                else f"[batch or 1, {h}, seq, {width}]"
                for h in dict.fromkeys(heads)
            )
            raise ValueError(
                f"rotation must be {name}'s tables for x's positions ({shapes}, with "
                f"batch={batch} and seq={seq}), got shapes {[tuple(t.shape) for t in rotation]}"
            )
        if t.device != device:
            raise ValueError(f"rotation is on {t.device}, x on {device}")
    return tuple(rotation)


def _fits(shape: torch.Size, batch: int, heads: int | None, seq: int, width: int) -> bool:
    """Whether a table of ``shape`` is ``[batch or 1, heads, seq, width]`` (``heads`` None:
    ``[seq, width]`` or ``[batch or 1, seq, width]``)."""
    lead = shape[:-2]
    if shape[-2:] != (seq, width) or len(lead) > (1 if heads is None else 2):
        return False
    if heads is not None and (len(lead) != 2 or lead[1] != heads):
        return False
    return not lead or lead[0] in (1, batch)
