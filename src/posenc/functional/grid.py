"""The math of additive encodings of image patch grids: 2-D sin-cos and learned tables.

- 2-D sin-cos (MAE, He et al. 2021, "Masked Autoencoders Are Scalable Vision Learners",
  arXiv:2111.06377; the fixed ViT embedding of its code): half of the ``dim`` channels
  encode one coordinate of the patch with the 1-D sinusoidal formula of Vaswani et al.
  (arXiv:1706.03762 §3.5) on ``dim / 2`` channels, laid out ``[sin | cos]``; the other half
  encode the other coordinate the same way::

      ω_i = base^(-i / (dim/4)),  i = 0 .. dim/4 - 1
      E(a) = [sin(a·ω_0) .. sin(a·ω_{dim/4-1}) | cos(a·ω_0) .. cos(a·ω_{dim/4-1})]
      PE(row, col) = [E(row) | E(col)]  (order "row_col")  or  [E(col) | E(row)]  ("col_row")

- learned tables (ViT, Dosovitskiy et al. 2020, arXiv:2010.11929): one row per prefix token
  (class, register tokens), then one per patch in row-major order, so patch ``(r, c)`` of an
  ``h x w`` grid reads row ``prefix + r * w + c``; resampled to another grid as an image
  (bicubic or bilinear), as ViTs are fine-tuned at a new resolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..arguments import (
    check_bool,
    check_choice,
    check_dtype,
    check_float,
    check_int,
    check_ints,
    check_tensor,
)
from .dtypes import math_dtype
from .sinusoidal import sin_cos_encoding, sinusoidal_inv_freq

__all__ = ["GRID_ORDERS", "RESAMPLE_MODES", "grid_table_index", "resample_grid_table", "sincos_2d"]

#: which coordinate fills the first half of the channels: ``row_col`` (row first, as
#: Hugging Face's ``build_2d_sinusoidal_position_embedding`` lays it out) or ``col_row``
#: (column first, as the original MAE code and its checkpoints do)
GRID_ORDERS = ("row_col", "col_row")
#: the ``torch.nn.functional.interpolate`` modes a learned grid table is resampled with
RESAMPLE_MODES = ("bicubic", "bilinear")


def sincos_2d(
    coords: torch.Tensor,
    dim: int,
    base: float = 10000.0,
    order: str = "col_row",
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The 2-D sin-cos encoding of (row, column) coordinates (MAE, He et al. 2021,
    arXiv:2111.06377): ``[E(row) | E(col)]`` or ``[E(col) | E(row)]``, where ``E`` is the 1-D
    sinusoidal encoding on ``dim / 2`` channels in the ``concat`` layout (module docstring).

    Args:
        coords: ``(row, col)`` pairs, integer or float (normalised grids, any sign).
        dim: the encoding size, divisible by 4 (sin and cos of two coordinates).
        base: the wavelength base (10000 in MAE).
        order: ``"col_row"`` (column first, MAE's checkpoints; the default) or ``"row_col"``.
        dtype: the result dtype; default float32, float64 for float64 coordinates. Angles
            are formed in float64 and reduced modulo 2π (as for RoPE), then rounded once.

    Shapes:
        coords ``[..., 2]`` -> ``[..., dim]``

    Example:
        >>> sincos_2d(torch.tensor([[0, 1]]), dim=4, order="row_col")
        tensor([[0.0000, 1.0000, 0.8415, 0.5403]])
    """
    check_tensor("coords", coords, kinds=("int", "float"))
    check_int("dim", dim, minimum=4)
    if dim % 4:
        raise ValueError(f"dim must be a positive multiple of 4 (sin and cos of 2 axes), got {dim}")
    check_float("base", base)
    check_choice("order", order, GRID_ORDERS)
    if dtype is not None:
        check_dtype("dtype", dtype)
    if coords.dim() == 0 or coords.shape[-1] != 2:
        raise ValueError(f"coords must be [..., 2] (row, col), got shape {tuple(coords.shape)}")
    inv_freq = sinusoidal_inv_freq(dim // 2, base, device=coords.device, dtype=torch.float64)
    rows = sin_cos_encoding(coords[..., 0], inv_freq, "concat", dtype=dtype)  # [..., dim/2]
    cols = sin_cos_encoding(coords[..., 1], inv_freq, "concat", dtype=dtype)  # [..., dim/2]
    return torch.cat((rows, cols) if order == "row_col" else (cols, rows), dim=-1)


def grid_table_index(coords: torch.Tensor, width: int, prefix: int = 0) -> torch.Tensor:
    """The row of a learned grid table that patch ``(r, c)`` reads: ``prefix + r * width + c``
    (prefix rows first, then the patches row-major, as a ViT flattens its patch grid).

    Shapes:
        coords ``[..., 2]`` integer -> ``[...]``

    Example:
        >>> grid_table_index(torch.tensor([[0, 0], [1, 2]]), width=3, prefix=1).tolist()
        [1, 6]
    """
    check_tensor("coords", coords, kinds=("int",))
    if coords.dim() == 0 or coords.shape[-1] != 2:
        raise ValueError(f"coords must be [..., 2] (row, col), got shape {tuple(coords.shape)}")
    check_int("width", width)
    check_int("prefix", prefix, minimum=0)
    return prefix + coords[..., 0] * width + coords[..., 1]


def resample_grid_table(
    table: torch.Tensor,
    grid: tuple[int, int],
    new_grid: tuple[int, int],
    prefix: int = 0,
    mode: str = "bicubic",
    antialias: bool | None = None,
) -> torch.Tensor:
    """Resample a learned grid table to another grid, as an image.

    The patch rows are reshaped to an image ``[1, dim, h, w]`` and interpolated to
    ``new_grid`` with ``torch.nn.functional.interpolate(align_corners=False)`` (as timm's
    ``resample_abs_pos_embed`` does for ViT fine-tuning at a new resolution); the ``prefix``
    rows are copied as they are. The math runs in float32 (float64 for a float64 table)
    and is rounded once to ``table.dtype``; it is differentiable.

    Args:
        table: ``[prefix + h * w, dim]``, prefix rows first, then patches row-major.
        grid: ``(h, w)``, the table's grid; new_grid: ``(new_h, new_w)``.
        prefix: rows for prefix tokens (class, register tokens) before the patches.
        mode: ``"bicubic"`` or ``"bilinear"``.
        antialias: low-pass filter while shrinking; default True when either side shrinks,
            False otherwise. (PyTorch's antialiased bicubic also uses PIL's kernel, a = -0.5
            instead of -0.75, so it changes an upsampled table too.)

    Shapes:
        table ``[prefix + h * w, dim]`` -> ``[prefix + new_h * new_w, dim]``
    """
    check_tensor("table", table, dims=(2,))
    check_ints("grid", grid, lengths=(2,))
    check_ints("new_grid", new_grid, lengths=(2,))
    check_int("prefix", prefix, minimum=0)
    check_choice("mode", mode, RESAMPLE_MODES)
    if antialias is not None:
        check_bool("antialias", antialias)
    (h, w), (new_h, new_w) = grid, new_grid
    if table.shape[0] != prefix + h * w:
        raise ValueError(
            f"table must be [prefix + h * w, dim] = [{prefix + h * w}, dim] for grid={grid} "
            f"and prefix={prefix}, got shape {tuple(table.shape)}"
        )
    if antialias is None:
        antialias = new_h < h or new_w < w
    dtype = math_dtype(table.dtype)
    dim = table.shape[1]
    image = table[prefix:].to(dtype).reshape(h, w, dim).permute(2, 0, 1).unsqueeze(0)
    if antialias and new_w == 1 and new_h != h:
        # PyTorch's antialiased kernel (CPU, torch 2.13) drops the height change when the
        # output is one column wide ([0, 1] -> [0, 0, 0]): resize the width, then the height
        # as the width of the transposed image (the same separable filter)
        image = _interpolate(image, (h, 1), mode, antialias)  # [1, dim, h, 1]
        resized = _interpolate(image.transpose(2, 3), (1, new_h), mode, antialias).transpose(2, 3)
    else:
        resized = _interpolate(image, (new_h, new_w), mode, antialias)  # [1, dim, new_h, new_w]
    resized = resized[0].permute(1, 2, 0).reshape(new_h * new_w, dim)  # [new_h * new_w, dim]
    return torch.cat((table[:prefix].to(dtype), resized)).to(table.dtype)


def _interpolate(image: torch.Tensor, size: tuple[int, int], mode: str, antialias: bool):
    """``image`` ``[1, dim, h, w]`` resized to ``size`` with ``align_corners=False``."""
    return F.interpolate(image, size=size, mode=mode, align_corners=False, antialias=antialias)
