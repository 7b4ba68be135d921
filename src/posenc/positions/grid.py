"""Positions of image patch grids: :func:`grid` builds them, and :class:`GridMixin` gives
the grid encodings (``sincos_2d``, ``learned_2d``, ``rope_2d``, ``rope_mixed``) their one
shared handling of them.

A vision transformer cuts an image into an ``h x w`` grid of patches and flattens it row by
row, after any prefix tokens (class, register tokens). Each token has one (row, column)
coordinate pair: positions are ``[seq, 2]`` or ``[batch, seq, 2]`` (Dosovitskiy et al.
2020, ViT, arXiv:2010.11929).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, overload

import torch

from ..arguments import MAX_INT, check_bool, check_device, check_int, check_size, check_str

__all__ = ["GridMixin", "check_grid", "check_grid_config", "grid", "grid_default_positions"]


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
    if prefix + h * w > MAX_INT:
        raise ValueError(f"prefix + h · w = {prefix + h * w} tokens, more than {MAX_INT}")
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {normalize!r}")
    device = check_device(device)
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
    _check_config(config)
    check_size("seq_len", seq_len)
    check_size("offset", offset)
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


@overload
def check_grid(name: str, value: Any, *, optional: Literal[False] = ...) -> tuple[int, int]: ...
@overload
def check_grid(name: str, value: Any, *, optional: bool) -> tuple[int, int] | None: ...
def check_grid(name: str, value: Any, *, optional: bool = False) -> tuple[int, int] | None:
    """``value`` as an ``(h, w)`` tuple of ints >= 1 (a list is accepted, as from JSON); None
    passes when ``optional``. Raises ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    check_str("name", name)
    check_bool("optional", optional)
    if value is None and optional:
        return None
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be a pair (h, w) of ints, got {value!r}")
    if len(value) != 2:
        raise ValueError(f"{name} must be a pair (h, w) of ints, got {value!r}")
    for axis, size in zip(("h", "w"), value, strict=True):
        check_int(f"{name} {axis}", size)
    return (value[0], value[1])


def check_grid_config(config: Any, *, optional: bool = True) -> None:
    """Check the ``grid`` and ``prefix`` keys every grid encoding's config has, in a
    ``__post_init__``: ``grid`` an ``(h, w)`` pair (normalised to a tuple; None passes when
    ``optional``), ``prefix`` an int >= 0."""
    _check_config(config)
    object.__setattr__(config, "grid", check_grid("grid", config.grid, optional=optional))
    check_int("prefix", config.prefix, minimum=0)


def _check_config(config: Any) -> None:
    """Raise ``TypeError`` unless ``config`` is a grid encoding's config (it has ``grid``
    and ``prefix`` keys)."""
    if not all(hasattr(config, key) for key in ("grid", "prefix", "encoding_name")):
        raise TypeError(
            f"config must be a grid encoding's config (with grid and prefix keys, e.g. "
            f"posenc.create('sincos_2d', ...).config), got {type(config).__name__}"
        )


class GridMixin:
    """What every encoding of image grids shares: (row, col) positions, negative ones
    included (normalised grids), and default positions from the configured ``grid`` and
    ``prefix`` (:func:`grid_default_positions`).

    Put it before the kind's base class (``class _GridEncoding(GridMixin,
    AdditiveEncoding)``); the config has ``grid`` and ``prefix`` keys
    (:func:`check_grid_config`).
    """

    position_axes: int = 2
    nonnegative_positions: bool = False
    #: whether the first ``prefix`` rows of the positions are read as the prefix tokens
    #: (additive encodings give them their own value) rather than as coordinates (rotary
    #: ones rotate them by (0, 0), the identity)
    prefix_rows: ClassVar[bool] = False
    config: Any

    def check_positions(
        self,
        positions: torch.Tensor,
        *,
        seq_len: int | None = None,
        batch: int | None = None,
        name: str = "positions",
        device: torch.device | None = None,
    ) -> torch.Tensor:
        """The encoding's checks; with ``prefix_rows``, at least ``prefix`` rows too."""
        positions = super().check_positions(  # type: ignore[misc]
            positions, seq_len=seq_len, batch=batch, name=name, device=device
        )
        prefix = self.config.prefix
        if self.prefix_rows and positions.shape[-2] < prefix:
            raise ValueError(
                f"{name} has {positions.shape[-2]} rows but this encoding has prefix={prefix}: "
                f"the first {prefix} rows are the prefix tokens, as "
                f"posenc.positions.grid(h, w, prefix={prefix}) builds them"
            )
        return positions

    def default_positions(
        self, seq_len: int, device: torch.device | str | None = None, offset: int = 0
    ) -> torch.Tensor:
        """``grid(h, w, prefix)[offset : offset + seq_len]`` of the configured grid, when
        the sequence ends at its last patch (see :func:`grid_default_positions`).

        With ``prefix_rows`` and prefix tokens the window must start at token 0: the first
        ``prefix`` rows of any positions are read as the prefix tokens, so a later window
        would be misread.
        """
        prefix = self.config.prefix
        if self.prefix_rows and offset and prefix:
            raise ValueError(
                f"{self.config.encoding_name} reads the first prefix={prefix} rows of the "
                f"positions as the prefix tokens, so its default positions start at token 0, "
                f"not {offset}: encode the whole sequence, or pass positions"
            )
        return grid_default_positions(self.config, seq_len, device, offset)
