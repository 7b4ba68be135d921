"""Additive encodings of image patch grids: ``sincos_2d`` (MAE) and ``learned_2d`` (ViT).

A vision transformer cuts an image into an ``h x w`` grid of patches and flattens it row by
row, after any prefix tokens (class, register tokens). These encodings take one (row, col)
coordinate pair per token, as :func:`posenc.positions.grid` builds them: ``[seq, 2]`` or
``[batch, seq, 2]``, the first ``prefix`` rows being the prefix tokens (their coordinates
are not read: prefix tokens get their own value, zeros for ``sincos_2d`` and their own
learned rows for ``learned_2d``). Explicit positions also serve a subset of the patches
(MAE's masking): the prefix rows, then the kept patches' coordinates.

- ``sincos_2d`` (He et al. 2021, MAE, arXiv:2111.06377): half the channels encode one axis
  with the fixed 1-D sinusoidal formula, half the other; defined for any grid and any
  coordinate, integer or normalised.
- ``learned_2d`` (Dosovitskiy et al. 2020, ViT, arXiv:2010.11929): a trainable row per
  prefix token and per patch of one grid; :meth:`LearnedGrid.resample` moves it to another.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..base import AdditiveConfig, AdditiveEncoding
from ..config import check_choice, check_float, check_int
from ..functional.grid import (
    GRID_ORDERS,
    RESAMPLE_MODES,
    grid_table_index,
    resample_grid_table,
    sincos_2d,
)
from ..positions import GridMixin, PositionOutOfRangeError, check_grid, check_grid_config
from ..registry import register

__all__ = ["GridOutOfRangeError", "LearnedGrid", "SinCos2D"]


class GridOutOfRangeError(PositionOutOfRangeError):
    """A token past a learned grid table: a coordinate outside its grid, or a sequence
    longer than its rows. A :class:`~posenc.PositionOutOfRangeError` (so a ``ValueError``).

    Attributes:
        position: the first offending ``(row, col)`` coordinate, or the index of the first
            token past the table.
        limit: the grid ``(h, w)``, or the table's number of rows.
        limit_name: ``"grid"``, the configuration key that sets the limit.
    """

    def __init__(self, position: Any, limit: Any, message: str) -> None:
        self.position = position
        self.limit = limit
        self.limit_name = "grid"
        ValueError.__init__(self, message)


class _GridEncoding(GridMixin, AdditiveEncoding):
    """What the additive grid encodings share (:class:`~posenc.positions.GridMixin`), the
    first ``prefix`` rows of the positions being the prefix tokens."""

    prefix_rows = True


@dataclasses.dataclass(frozen=True)
class SinCos2DConfig(AdditiveConfig):
    """Configuration of :class:`SinCos2D`.

    Attributes:
        dim: encoding size, divisible by 4.
        base: the wavelength base (10000 in MAE).
        order: which coordinate fills the first half of the channels. The default
            ``"col_row"`` is what MAE's checkpoints hold: the original code builds its grid
            with ``np.meshgrid(grid_w, grid_h)``, so the half it calls ``emb_h`` encodes the
            column; Hugging Face's ViT-MAE builds ``[row | col]`` with
            ``build_2d_sinusoidal_position_embedding`` and then swaps the halves "to match
            pretrained weights". ``"row_col"`` is the canonical layout of that builder.
        grid: ``(h, w)``, the grid of the default positions (None: pass positions).
        prefix: prefix tokens (class, register tokens) before the patches; they get zeros.
    """

    dim: int
    base: float = 10000.0
    order: str = "col_row"
    grid: tuple[int, int] | None = None
    prefix: int = 0

    def __post_init__(self) -> None:
        check_int("dim", self.dim, minimum=4)
        if self.dim % 4:
            raise ValueError(f"dim must be divisible by 4 (sin and cos of 2 axes), got {self.dim}")
        check_float("base", self.base)
        check_choice("order", self.order, GRID_ORDERS)
        check_grid_config(self)


@register(
    "sincos_2d",
    trainable=False,
    relative=False,
    extrapolates=True,
    reference="He et al. 2021, Masked Autoencoders Are Scalable Vision Learners, arXiv:2111.06377",
    summary="fixed sin/cos of the patch column on half the channels, of the row on the other",
    formula=(
        "x'_t = x_t + PE(r, c) at row r, column c:  PE(r, c) = [E(c) | E(r)];  prefix tokens: 0\n"
        'E(a) = [sin(a·ω_i) | cos(a·ω_i)],  ω_i = base^(−i/(d/4)), i < d/4 ("row_col": r first)'
    ),
)
class SinCos2D(_GridEncoding):
    """The fixed 2-D sin-cos encoding of MAE (:func:`posenc.functional.grid.sincos_2d`)::

        PE(row, col) = [E(col) | E(row)]   (order "col_row", the default; "row_col" swaps)
        E(a) = [sin(a·ω_i) | cos(a·ω_i)],  ω_i = base^(-i / (dim/4)),  i < dim/4

    No parameters and no table: any grid (rectangular included) and any coordinate
    (integer, or normalised floats from ``grid(h, w, normalize=True)``) is computed on each
    call in float32, so nothing limits the grid or can be rounded by ``.to(bfloat16)``.
    Prefix tokens get zeros, as the class token in MAE. With ``grid=(h, w), prefix=1``,
    ``encode(default_positions(1 + h * w))`` is Hugging Face ViT-MAE's position embedding.

    Shapes:
        x: ``[batch, seq, dim]``; positions: ``[seq, 2]`` or ``[batch, seq, 2]`` (row, col),
        the first ``prefix`` rows for the prefix tokens -> ``encode``: ``[..., seq, dim]``.

    Example:
        >>> import posenc
        >>> enc = posenc.create("sincos_2d", dim=8, grid=(2, 3), prefix=1)
        >>> enc.encode(posenc.positions.grid(2, 3, prefix=1))[:2]
        tensor([[0., 0., 0., 0., 0., 0., 0., 0.],
                [0., 0., 1., 1., 0., 0., 1., 1.]])
    """

    Config = SinCos2DConfig
    config: SinCos2DConfig

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        c = self.config
        patches = sincos_2d(positions[..., c.prefix :, :], c.dim, c.base, c.order, dtype=dtype)
        if not c.prefix:
            return patches
        zeros = patches.new_zeros(*patches.shape[:-2], c.prefix, c.dim)  # [..., prefix, dim]
        return torch.cat((zeros, patches), dim=-2)


@dataclasses.dataclass(frozen=True)
class LearnedGridConfig(AdditiveConfig):
    """Configuration of :class:`LearnedGrid`.

    Attributes:
        dim: embedding size.
        grid: ``(h, w)``, the patch grid of the table (required: it sets the table's size).
        prefix: prefix tokens (class, register tokens), each with its own row.
        init_std: standard deviation of the normal initialisation. The default 0.02 is
            ViT's (the reference code, timm and Hugging Face all use it). The rule is that
            of :class:`~posenc.additive.Learned`: start at the scale of the embeddings the
            table is added to; a ViT's patch embeddings come from a linear projection of
            pixels, not from the unit-scale token table of posenc's ``TransformerLM``.
    """

    dim: int
    grid: tuple[int, int]
    prefix: int = 0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_int("dim", self.dim)
        check_grid_config(self, optional=False)
        check_float("init_std", self.init_std)


@register(
    "learned_2d",
    trainable=True,
    relative=False,
    extrapolates=False,
    reference="Dosovitskiy et al. 2020, An Image is Worth 16x16 Words, arXiv:2010.11929",
    summary="a trainable vector per prefix token and per patch of one grid (ViT)",
    formula="x'_t = x_t + W[prefix + r·w + c] at (row r, col c) of h × w; prefix t: W[t]; learned",
)
class LearnedGrid(_GridEncoding):
    """ViT's learned position embedding: a table ``weight`` of ``[prefix + h * w, dim]``,
    prefix rows first, then the patches row-major, so patch ``(r, c)`` reads row
    ``prefix + r * w + c`` and prefix token ``i`` row ``i``.

    A coordinate outside the grid (``r >= h`` or ``c >= w``) or a default sequence longer
    than the table raises :class:`GridOutOfRangeError` (a
    :class:`~posenc.PositionOutOfRangeError`) naming ``grid``: the table must be resampled
    (:meth:`resample`) for an image of another size, never silently clamped or wrapped.

    Shapes:
        x: ``[batch, seq, dim]``; positions: ``[seq, 2]`` or ``[batch, seq, 2]`` integer
        (row, col), the first ``prefix`` rows for the prefix tokens -> ``[..., seq, dim]``.

    Example:
        >>> import posenc, torch
        >>> enc = posenc.create("learned_2d", dim=4, grid=(2, 3), prefix=1)
        >>> enc.weight.shape
        torch.Size([7, 4])
        >>> torch.equal(enc.encode(torch.tensor([[0, 0], [1, 2]]))[1], enc.weight[6])
        True
        >>> enc.resample((3, 3)).weight.shape
        torch.Size([10, 4])
    """

    Config = LearnedGridConfig
    config: LearnedGridConfig
    integer_positions = True
    nonnegative_positions = True
    limit_name = "grid"

    def __init__(self, config: LearnedGridConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        rows = c.prefix + c.grid[0] * c.grid[1]
        self.weight = nn.Parameter(torch.empty(rows, c.dim, **self.factory_kwargs))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=self.config.init_std)

    def check_positions(
        self, positions, *, seq_len=None, batch=None, name="positions", device=None
    ) -> torch.Tensor:
        """The grid checks, then every patch coordinate inside ``grid`` (skipped while
        ``torch.compile`` traces and on the meta device, as value checks are)."""
        positions = super().check_positions(
            positions, seq_len=seq_len, batch=batch, name=name, device=device
        )
        if torch.compiler.is_compiling() or positions.device.type == "meta":
            return positions
        (h, w), prefix = self.config.grid, self.config.prefix
        coords = positions[..., prefix:, :].reshape(-1, 2)  # [n, 2]
        outside = (coords[:, 0] >= h) | (coords[:, 1] >= w)
        if bool(outside.any()):
            r, c = coords[outside][0].tolist()
            raise GridOutOfRangeError(
                (r, c),
                (h, w),
                f"{name} holds the coordinate (row, col) = ({r}, {c}), outside this table's "
                f"grid=({h}, {w}): rows must be in [0, {h - 1}] and columns in [0, {w - 1}]; "
                f"resample() the table to the image's grid",
            )
        return positions

    def default_positions(
        self, seq_len: int, device: torch.device | str | None = None, offset: int = 0
    ) -> torch.Tensor:
        """:meth:`GridMixin.default_positions <posenc.positions.GridMixin.default_positions>`,
        a sequence past the table's rows a :class:`GridOutOfRangeError`."""
        check_int("seq_len", seq_len, minimum=0)  # before the sum below
        check_int("offset", offset, minimum=0)
        rows = self.weight.shape[0]
        if offset + seq_len > rows:
            c = self.config
            raise GridOutOfRangeError(
                rows,
                rows,
                f"the sequence has {offset + seq_len} tokens but this table has "
                f"prefix + h * w = {rows} rows (grid={c.grid}, prefix={c.prefix}): "
                f"resample() it to the image's grid, or pass positions",
            )
        return super().default_positions(seq_len, device, offset)

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        prefix, width = self.config.prefix, self.config.grid[1]
        index = grid_table_index(positions[..., prefix:, :], width, prefix)  # [..., seq - p]
        if prefix:
            first = torch.arange(prefix, device=index.device).expand(*index.shape[:-1], prefix)
            index = torch.cat((first, index), dim=-1)  # [..., seq]
        return F.embedding(index, self.weight).to(dtype)

    @torch.no_grad()
    def resample(
        self, new_grid: tuple[int, int], mode: str = "bicubic", antialias: bool | None = None
    ) -> LearnedGrid:
        """Resample the patch rows to ``new_grid`` as an image, in place, and return ``self``.

        Args:
            new_grid: ``(new_h, new_w)``; the current grid returns ``self`` unchanged. A grid
                of the same size but another shape (``(4, 6) -> (6, 4)``) is resampled.
            mode: ``"bicubic"`` (the default, as timm and Hugging Face ViTs) or
                ``"bilinear"``.
            antialias: low-pass filter; default True when either side shrinks, else False.

        Interpolation runs in float32 with ``align_corners=False`` (see
        :func:`posenc.functional.grid.resample_grid_table`); the prefix rows are kept. The
        parameter is replaced (same dtype, device and ``requires_grad``), so build the
        optimizer (again) after resampling.
        """
        new_grid = check_grid("new_grid", new_grid)
        check_choice("mode", mode, RESAMPLE_MODES)
        if antialias is not None and not isinstance(antialias, bool):
            raise TypeError(f"antialias must be None, True or False, got {antialias!r}")
        c = self.config
        if new_grid == c.grid:
            return self
        new = resample_grid_table(self.weight.detach(), c.grid, new_grid, c.prefix, mode, antialias)
        self.weight = nn.Parameter(new.contiguous(), self.weight.requires_grad)
        self.config = c.replace(grid=new_grid)
        return self
