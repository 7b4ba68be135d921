"""Positions: validation and defaults shared by every encoding.

Positions are explicit tensors: ``[seq]`` (shared by the batch) or ``[batch, seq]`` (a
different offset per sequence, KV-cache decoding); image grids take ``[seq, 2]`` or
``[batch, seq, 2]`` (row, column). Integer and fractional positions are both accepted
where the encoding is defined for them; anything else is an error that names the
parameter, never a silent clamp or wrap.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ..arguments import (
    MAX_POSITION,
    check_bool,
    check_device,
    check_int,
    check_ints,
    check_size,
    check_str,
    check_tensor,
)
from ..host_reads import read, reads_values

__all__ = [
    "PositionOutOfRangeError",
    "arange",
    "causal_mask",
    "check_batch",
    "check_positions",
    "position_at",
]


class PositionOutOfRangeError(ValueError):
    """A position lies outside what an encoding can represent (e.g. a learned table's size).

    Attributes:
        position: the first offending position.
        limit: the exclusive upper limit.
        limit_name: the configuration key that sets the limit (e.g. ``"max_positions"``).
    """

    def __init__(self, position: int | float, limit: int, limit_name: str) -> None:
        self.position = position
        self.limit = limit
        self.limit_name = limit_name
        super().__init__(
            f"position {position} is out of range: this encoding has {limit_name}={limit}, "
            f"so positions must be in [0, {limit - 1}]"
        )


def arange(seq_len: int, device: torch.device | str | None = None, offset: int = 0) -> torch.Tensor:
    """The default positions ``offset, offset + 1, ..., offset + seq_len - 1`` as int64.

    Shapes:
        returns ``[seq_len]``
    """
    check_size("seq_len", seq_len)
    check_size("offset", offset, maximum=MAX_POSITION)
    if not isinstance(device, torch.device):
        device = check_device(device)
    return torch.arange(offset, offset + seq_len, device=device, dtype=torch.long)


#: the default numbers of dimensions of positions: ``[seq]`` or ``[batch, seq]``
_NDIMS = (1, 2)


def check_positions(
    positions: torch.Tensor,
    *,
    seq_len: int | None = None,
    name: str = "positions",
    integer: bool = False,
    limit: int | None = None,
    limit_name: str = "max_positions",
    ndims: tuple[int, ...] = _NDIMS,
    axes: int = 1,
    nonnegative: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Validate a positions tensor and return it as encodings compute with it: integer
    dtypes other than int64 (uint8, int16, ...) as int64, so that nothing wraps (``i - j``
    in uint8) and every table lookup takes them; other dtypes unchanged.

    Args:
        positions: ``[seq]`` or ``[batch, seq]``, integer or floating; with ``axes > 1``,
            ``[seq, axes]`` or ``[batch, seq, axes]`` (one coordinate per axis).
        seq_len: if given, the sequence dimension must equal it.
        name: the parameter name used in messages.
        integer: require an integer dtype (table lookups).
        limit: exclusive upper bound; a position at or past it raises
            :class:`PositionOutOfRangeError` naming ``limit_name``.
        ndims: the accepted numbers of dimensions (for ``axes == 1``).
        axes: coordinates per position (2 for image grids: row, column).
        nonnegative: require positions >= 0 (grid coordinates may be negative).
        device: if given, the device the positions must be on (that of the input or the
            encoding's parameters): a tensor elsewhere raises instead of failing inside torch,
            or, from the meta device, returning values never computed.

    Every position must also lie within ``±MAX_POSITION`` (2**53). The other arguments are
    checked too (``TypeError``/``ValueError`` naming them): an int where an int goes, a str
    for the names, a tuple (or list) of ints for ``ndims``.

    Value checks (negative, non-finite, past ``limit`` or ``MAX_POSITION``) read the tensor
    (:func:`posenc.host_reads.read`: one host read, or one shared by a whole forward), so
    they follow :func:`~posenc.host_reads.reads_values`: skipped while ``torch.compile``
    traces, on the meta device, with validation off and where the caller checked them
    already; shape, dtype and device checks always run.
    """
    _check_options(seq_len, name, integer, limit, limit_name, ndims, axes, nonnegative)
    if device is not None and not isinstance(device, torch.device):
        device = check_device(device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    if integer and positions.is_floating_point():
        raise TypeError(
            f"{name} must be integer for this encoding (an integer tensor), got {positions.dtype}"
        )
    if axes == 1 and positions.dim() not in ndims:
        shapes = " or ".join(f"{n}-D" for n in ndims)
        raise ValueError(f"{name} must be {shapes}, got shape {tuple(positions.shape)}")
    if axes > 1 and (positions.dim() not in (2, 3) or positions.shape[-1] != axes):
        raise ValueError(
            f"{name} must be [seq, {axes}] or [batch, seq, {axes}] (one coordinate per axis, "
            f"e.g. posenc.positions.grid(h, w)), got shape {tuple(positions.shape)}"
        )
    seq_dim = -1 if axes == 1 else -2
    if seq_len is not None and positions.shape[seq_dim] != seq_len:
        where = "in its last dimension" if axes == 1 else "(rows)"
        raise ValueError(
            f"{name} has {positions.shape[seq_dim]} positions {where} "
            f"but the sequence has {seq_len}"
        )
    if device is not None and positions.device != device:
        raise ValueError(
            f"{name} is on {positions.device} but the input is on {device}: move {name} there"
        )
    source = positions.dtype
    if not positions.is_floating_point() and source != torch.int64:
        positions = positions.long()  # exact for every integer dtype up to MAX_POSITION
    if reads_values(positions):  # one pass; one host read (or one of a batch)
        read(
            torch.stack(torch.aminmax(positions)),
            partial(_check_range, name, source, nonnegative, limit, limit_name),
        )
    return positions


def _check_options(
    seq_len: object,
    name: object,
    integer: object,
    limit: object,
    limit_name: object,
    ndims: object,
    axes: object,
    nonnegative: object,
) -> None:
    """Raise ``TypeError``/``ValueError`` naming the argument of :func:`check_positions`
    (other than the positions and the device) that is not what it says."""
    check_str("name", name)
    if seq_len is not None:
        check_size("seq_len", seq_len)
    check_bool("integer", integer)
    if limit is not None:
        check_int("limit", limit, maximum=MAX_POSITION)
    check_str("limit_name", limit_name)
    if ndims is not _NDIMS:  # the default is known good: no loop on the per-call path
        check_ints("ndims", ndims, lengths=range(1, 9), minimum=0, maximum=8)
    check_int("axes", axes)
    check_bool("nonnegative", nonnegative)


def _check_range(
    name: str,
    source: torch.dtype,
    nonnegative: bool,
    limit: int | None,
    limit_name: str,
    values: list,
) -> None:
    """Raise unless the positions' ``[min, max]`` (``values``) are what
    :func:`check_positions` was asked for."""
    low, high = values
    if not (math.isfinite(low) and math.isfinite(high)):  # NaN and inf reach min or max
        raise ValueError(f"{name} must be finite, got non-finite values")
    if source == torch.uint64 and low < 0:  # values past 2**63 wrapped in the conversion
        raise ValueError(f"{name} must be <= {MAX_POSITION} (2**53), got values >= 2**63")
    if nonnegative and low < 0:
        raise ValueError(f"{name} must be >= 0, got {low}")
    if limit is not None and high >= limit:
        raise PositionOutOfRangeError(high, limit, limit_name)
    if max(-low, high) > MAX_POSITION:
        worst = low if -low > high else high
        raise ValueError(
            f"{name} must lie within [-{MAX_POSITION}, {MAX_POSITION}] (±2**53, where float64 "
            f"still holds every integer), got {worst:g}"
        )


def position_at(
    positions: torch.Tensor | None, b: torch.Tensor, index: torch.Tensor, offset: int = 0
) -> torch.Tensor:
    """The position of element ``index`` of sequence ``b``, inside a flex-attention
    ``score_mod``: ``index + offset`` when ``positions`` is None (the default layout),
    else ``positions[index]`` (``[len]``) or ``positions[b, index]`` (``[batch, len]``)."""
    if positions is None:
        return index + offset
    return positions[index] if positions.dim() == 1 else positions[b, index]


def causal_mask(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """True where a query may see a key: ``k_position <= q_position``.

    Shapes:
        q_positions ``[q_len]`` or ``[batch, q_len]``; k_positions ``[k_len]`` or
        ``[batch, k_len]`` -> ``[q_len, k_len]`` or ``[batch, 1, q_len, k_len]``.
    """
    check_tensor("q_positions", q_positions, kinds=("int", "float"), dims=(1, 2))
    check_tensor("k_positions", k_positions, kinds=("int", "float"), dims=(1, 2))
    if q_positions.device != k_positions.device:
        raise ValueError(
            f"q_positions is on {q_positions.device} but k_positions on {k_positions.device}"
        )
    mask = k_positions.unsqueeze(-2) <= q_positions.unsqueeze(-1)  # [..., q_len, k_len]
    return mask.unsqueeze(-3) if mask.dim() == 3 else mask


def check_batch(
    positions: torch.Tensor, batch: int, name: str = "positions", axes: int = 1
) -> None:
    """Raise unless ``positions`` is ``[len]`` or ``[1 or batch, len]`` for this batch (with
    ``axes > 1``: ``[len, axes]`` or ``[1 or batch, len, axes]``)."""
    check_str("name", name)
    if (
        not isinstance(positions, torch.Tensor)
        or positions.dtype == torch.bool
        or positions.is_complex()
    ):
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"{name} must be an integer or floating tensor, got {got}")
    check_size("batch", batch, minimum=1)
    check_int("axes", axes)
    # no `in (1, batch)`: dynamo answers False for a static size among symbolic ones
    # (a batch made dynamic by a recompile), so two comparisons
    rows = positions.shape[0]
    if positions.dim() == (2 if axes == 1 else 3) and rows != 1 and rows != batch:
        raise ValueError(f"{name} has batch size {positions.shape[0]} but the input has {batch}")
