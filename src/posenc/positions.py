"""Positions: validation and defaults shared by every encoding.

Positions are explicit tensors: ``[seq]`` (shared by the batch) or ``[batch, seq]`` (a
different offset per sequence, KV-cache decoding). Encodings of image grids take one
coordinate pair per token instead: ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column), as
:func:`grid` builds them; M-RoPE takes Hugging Face's ``[3, batch, seq]`` (see
:func:`multimodal`). They set the encoding and the causal
mask (``k_position <= q_position``) only; padding and packed documents have masks of their
own (``key_padding_mask``, ``segment_ids`` in :func:`posenc.attention`), and
:func:`from_padding` and :func:`from_segments` give their positions. Integer and
fractional positions are both accepted where the encoding is defined for them; anything
else is an error that names the parameter, never a silent clamp or wrap.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .config import MAX_POSITION, check_int

__all__ = [
    "PositionOutOfRangeError",
    "arange",
    "causal_mask",
    "check_batch",
    "check_padding_mask",
    "check_positions",
    "check_segment_ids",
    "from_padding",
    "from_segments",
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

    Every position must also lie within ``±MAX_POSITION`` (2**53).

    Value checks (negative, non-finite, past ``limit`` or ``MAX_POSITION``) read the tensor,
    so they are skipped while ``torch.compile`` traces (a data-dependent branch would break
    the graph) and on the meta device (no values); shape, dtype and device checks always run.
    """
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
    if device is not None and positions.device != torch.device(device):
        raise ValueError(
            f"{name} is on {positions.device} but the input is on {torch.device(device)}: "
            f"move {name} there"
        )
    source = positions.dtype
    if not positions.is_floating_point() and source != torch.int64:
        positions = positions.long()  # exact for every integer dtype up to MAX_POSITION
    if torch.compiler.is_compiling() or positions.device.type == "meta" or positions.numel() == 0:
        return positions
    low, high = torch.stack(torch.aminmax(positions)).tolist()  # one pass, one sync
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
        check_int(name, value, minimum=minimum)
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {normalize!r}")
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


def check_padding_mask(mask: Any, name: str = "attention_mask") -> torch.Tensor:
    """Validate a ``[batch, seq]`` padding mask (True or 1 = a real token, False or 0 = a
    pad, Hugging Face's ``attention_mask``) and return it as bool."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"{name} must be a bool or integer (0/1) tensor, got {mask.dtype}")
    if mask.dim() != 2:
        raise ValueError(f"{name} must be [batch, seq], got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    readable = not torch.compiler.is_compiling() and mask.device.type != "meta"
    if readable and bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError(f"{name} must hold only 0 (pad) and 1 (real token)")
    return mask != 0


def check_segment_ids(segment_ids: Any, name: str = "segment_ids") -> torch.Tensor:
    """Validate ``[batch, seq]`` integer document ids and return them unchanged."""
    if not isinstance(segment_ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(segment_ids).__name__}")
    if (
        segment_ids.is_floating_point()
        or segment_ids.is_complex()
        or segment_ids.dtype == (torch.bool)
    ):
        raise TypeError(f"{name} must be an integer tensor, got {segment_ids.dtype}")
    if segment_ids.dim() != 2:
        raise ValueError(f"{name} must be [batch, seq], got shape {tuple(segment_ids.shape)}")
    return segment_ids


def from_padding(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that count real tokens only: ``cumsum(mask) - 1``, pads at 0.

    A left-padded row ``[pad, pad, a, b, c]`` gets ``[0, 0, 0, 1, 2]``, so each prompt has
    the positions it has alone (Hugging Face's convention for batched generation). Pads get
    0; they must also be masked as keys (``key_padding_mask``), which this does not do.

    Shapes:
        attention_mask ``[batch, seq]`` (bool, or 0/1 integers) -> ``[batch, seq]`` int64.

    Example:
        >>> from_padding(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])).tolist()
        [[0, 0, 0, 1, 2], [0, 1, 2, 3, 0]]
    """
    mask = check_padding_mask(attention_mask)
    return (mask.long().cumsum(-1) - 1).masked_fill(~mask, 0)


def from_segments(
    segment_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Positions that restart at 0 in every packed document.

    A document is a run of equal ids; an id may not reappear after another one in the same
    row (the mask compares ids, so that would join two documents). With ``attention_mask``
    only real tokens are counted and pads get 0, as in :func:`from_padding`. Each document
    then gets exactly the positions it has alone, so a packed batch gives it the result it
    gets alone (with the segment mask of :func:`posenc.attention`).

    Shapes:
        segment_ids ``[batch, seq]`` integers; attention_mask ``[batch, seq]`` ->
        ``[batch, seq]`` int64.

    Example:
        >>> from_segments(torch.tensor([[0, 0, 0, 1, 1, 2]])).tolist()
        [[0, 1, 2, 0, 1, 0]]
    """
    ids = check_segment_ids(segment_ids)
    if attention_mask is None:
        real = torch.ones_like(ids, dtype=torch.long)
    else:
        real = check_padding_mask(attention_mask).long()
        if real.shape != ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(real.shape)} but segment_ids "
                f"{tuple(ids.shape)}: they must match"
            )
    seq = ids.shape[-1]
    starts = torch.ones_like(ids, dtype=torch.bool)  # True where a document starts
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    if not torch.compiler.is_compiling() and ids.device.type != "meta" and seq > 1:
        distinct = (ids.sort(dim=-1).values.diff(dim=-1) != 0).sum(-1) + 1
        if bool((starts.sum(-1) != distinct).any()):
            raise ValueError(
                "segment_ids: an id reappears after another one in the same row; give each "
                "packed document its own id (a run of equal ids, e.g. 0, 0, 1, 1, 1, 2)"
            )
    index = torch.arange(seq, device=ids.device).expand_as(ids)
    start = torch.where(starts, index, 0).cummax(dim=-1).values  # [b, seq]: document start
    before = real.cumsum(-1) - real  # [b, seq]: real tokens before each token in its row
    positions = before - before.gather(-1, start)
    return positions.masked_fill(real == 0, 0)


from .multimodal import multimodal  # noqa: E402  (text, images and videos: M-RoPE ids)
