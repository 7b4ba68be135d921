"""Positions: validation and defaults shared by every encoding.

Positions are explicit tensors: ``[seq]`` (shared by the batch) or ``[batch, seq]`` (a
different offset per sequence, KV-cache decoding). Encodings of image grids take one
coordinate pair per token instead: ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column), as
:func:`grid` builds them; M-RoPE takes Hugging Face's ``[3, batch, seq]`` (see
:func:`multimodal`). They set the encoding and the causal
mask (``k_position <= q_position``) only: they do not isolate packed documents or hide
padding tokens, which needs a mask of its own. Integer and fractional positions are both
accepted where the encoding is defined for them; anything else is an error that names the
parameter, never a silent clamp or wrap.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "PositionOutOfRangeError",
    "arange",
    "causal_mask",
    "check_batch",
    "check_positions",
    "grid",
    "grid_default_positions",
    "multimodal",
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
    return torch.arange(offset, offset + seq_len, device=device, dtype=torch.long)


def check_positions(
    positions: torch.Tensor,
    *,
    seq_len: int | None = None,
    name: str = "positions",
    integer: bool = False,
    limit: int | None = None,
    limit_name: str = "max_positions",
    ndims: tuple[int, ...] = (1, 2),
    axes: int = 1,
    nonnegative: bool = True,
) -> torch.Tensor:
    """Validate a positions tensor and return it unchanged.

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

    Value checks (negative, non-finite, past ``limit``) read the tensor, so they are skipped
    while ``torch.compile`` traces (a data-dependent branch would break the graph); shape and
    dtype checks always run.
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    if integer and positions.is_floating_point():
        raise TypeError(
            f"{name} must be an integer tensor for this encoding, got {positions.dtype}"
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
    if torch.compiler.is_compiling() or positions.device.type == "meta" or positions.numel() == 0:
        return positions
    if positions.is_floating_point() and not bool(torch.isfinite(positions).all()):
        raise ValueError(f"{name} must be finite, got non-finite values")
    low = positions.min()
    if nonnegative and bool(low < 0):
        raise ValueError(f"{name} must be >= 0, got {low.item()}")
    if limit is not None:
        high = positions.max()
        if bool(high >= limit):
            raise PositionOutOfRangeError(high.item(), limit, limit_name)
    return positions


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
    mask = k_positions.unsqueeze(-2) <= q_positions.unsqueeze(-1)  # [..., q_len, k_len]
    return mask.unsqueeze(-3) if mask.dim() == 3 else mask


def check_batch(
    positions: torch.Tensor, batch: int, name: str = "positions", axes: int = 1
) -> None:
    """Raise unless ``positions`` is ``[len]`` or ``[1 or batch, len]`` for this batch (with
    ``axes > 1``: ``[len, axes]`` or ``[1 or batch, len, axes]``)."""
    if positions.dim() == (2 if axes == 1 else 3) and positions.shape[0] not in (1, batch):
        raise ValueError(f"{name} has batch size {positions.shape[0]} but the input has {batch}")


def grid(
    h: int,
    w: int,
    prefix: int = 0,
    *,
    normalize: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The (row, column) position of every patch of an ``h x w`` grid, row-major, as the
    patches of a ViT come out of its patch embedding (``flatten(2)`` of ``[b, dim, h, w]``).

    Args:
        h, w: the grid's rows and columns (patches, not pixels).
        prefix: prefix tokens (class, register, distillation tokens) before the patches;
            they get the coordinates (0, 0), so the sequence and the positions line up.
            Rotating by (0, 0) is the identity, so rotary grid encodings leave them as they
            are; additive ones configured with ``prefix`` give them their own value.
        normalize: coordinates of the patch centres scaled to [-1, 1] (row r at
            ``(r + 0.5) / h * 2 - 1``), so that an image at any resolution spans the same
            range, as float32; by default integer row and column indices.

    Shapes:
        returns ``[prefix + h * w, 2]``; int64, or float32 with ``normalize``.

    Example:
        >>> grid(2, 3).tolist()
        [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    """
    for name, value, minimum in (("h", h, 1), ("w", w, 1), ("prefix", prefix, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value}")
    rows = torch.arange(h, device=device)
    cols = torch.arange(w, device=device)
    if normalize:
        rows = (rows.double() + 0.5) / h * 2 - 1
        cols = (cols.double() + 0.5) / w * 2 - 1
    coords = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(h * w, 2)
    if normalize:
        coords = coords.float()
    return torch.cat((coords.new_zeros(prefix, 2), coords))


def grid_default_positions(
    config: Any,
    seq_len: int,
    device: torch.device | str | None = None,
    offset: int = 0,
) -> torch.Tensor:
    """The default positions of a grid encoding: tokens ``offset .. offset + seq_len - 1``
    of ``grid(h, w, prefix)`` for the configured ``config.grid`` and ``config.prefix``.

    Only a sequence that ends exactly at the grid's last patch has defaults: any other
    length would be a guess, so it raises ``ValueError`` and says what to pass instead.

    Shapes:
        returns ``[seq_len, 2]`` int64
    """
    name, size, prefix = config.encoding_name, config.grid, config.prefix
    if size is None:
        raise ValueError(
            f"{name} has no grid configured, so there are no default positions: pass "
            f"positions=posenc.positions.grid(h, w, prefix={prefix}) (or configure grid=(h, w))"
        )
    h, w = size
    total = prefix + h * w
    if offset + seq_len != total:
        after = f" after {offset} earlier tokens" if offset else ""
        raise ValueError(
            f"{name} has grid={size} and prefix={prefix}, so its default positions cover "
            f"{total} tokens, but the sequence has {seq_len}{after}: pass "
            f"positions=posenc.positions.grid(h, w, prefix={prefix}) for the image's grid"
        )
    return grid(h, w, prefix, device=device)[offset : offset + seq_len]


from .multimodal import multimodal  # noqa: E402  (text, images and videos: M-RoPE ids)
