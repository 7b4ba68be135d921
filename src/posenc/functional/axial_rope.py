"""Rotary position embedding of image grids: axial 2-D RoPE and RoPE-Mixed (Heo et al. 2024,
"Rotary Position Embedding for Vision Transformer", arXiv:2403.13298).

A patch at row y, column x rotates each of its ``head_dim / 2`` pairs by an angle that is
linear in (x, y), so that ⟨R(p) q, R(p') k⟩ depends on q, k and the offset p - p' only:

- axial (``rope_2d``): θ_i = base^(-4i/head_dim) for i < head_dim/4 (base 100, the paper's
  choice for images); one half of the pairs rotates by x·θ_i, the other half by y·θ_i.
  The paper's code puts x (the column) in the first half; DINOv3 puts y (the row) first
  and multiplies the normalised coordinates by 2π (both are options here).
- mixed (``rope_mixed``): learnable frequencies per head, pair i of head h rotates by
  x·f_x[h, i] + y·f_y[h, i]; so a pair can follow any direction of the image, not only
  the two axes. Initialised with the axial magnitudes (base 10) turned by a random angle
  per head: see :func:`rope_mixed_freqs`.

Positions are ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column) pairs, as
:func:`posenc.positions.grid` builds them. The tables are applied with
:func:`posenc.functional.apply_rope` in either pair layout.
"""

from __future__ import annotations

import math

import torch

from ..arguments import (
    check_base,
    check_choice,
    check_device,
    check_devices,
    check_float,
    check_int,
    check_movable,
    check_tensor,
)
from .dtypes import math_dtype, wide_dtype
from .rope import rope_cos_sin
from .rope_scaling import default_inv_freq

__all__ = [
    "AXIS_ORDERS",
    "axial_rope_cos_sin",
    "axial_rope_inv_freq",
    "rope_mixed_cos_sin",
    "rope_mixed_freqs",
]

#: which coordinate the first half of the pairs takes: ``"xy"`` the column (x) first, as
#: Heo et al.'s code; ``"yx"`` the row (y) first, as DINOv3
AXIS_ORDERS = ("xy", "yx")


def _check_head_dim(head_dim: int) -> None:
    check_int("head_dim", head_dim, minimum=4)
    if head_dim % 4:
        raise ValueError(
            f"head_dim must be a positive multiple of 4 (a quarter of the dimensions per axis "
            f"and sin/cos pair), got {head_dim}"
        )


def _check_grid_positions(positions: torch.Tensor) -> None:
    check_tensor("positions", positions, kinds=("int", "float"))
    if positions.dim() not in (2, 3) or positions.shape[-1] != 2:
        raise ValueError(
            "positions must be [seq, 2] or [batch, seq, 2] (row, column), got shape "
            f"{tuple(positions.shape)}"
        )


def axial_rope_inv_freq(
    head_dim: int,
    base: float = 100.0,
    coord_scale: float = 1.0,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The per-axis frequencies of axial 2-D RoPE: ``coord_scale · base^(-4i/head_dim)``.

    Each axis rotates ``head_dim / 4`` pairs, with the frequencies of a 1-D RoPE of
    dimension ``head_dim / 2``. ``coord_scale`` multiplies the coordinates (DINOv3: 2π with
    coordinates normalised to [-1, 1]); folding it into the frequencies is the same angle.

    Shapes:
        returns ``[head_dim // 4]``, float64

    Example:
        >>> axial_rope_inv_freq(16, base=100.0).round(decimals=4).tolist()
        [1.0, 0.3162, 0.1, 0.0316]
    """
    _check_head_dim(head_dim)
    check_base("base", base)
    check_float("coord_scale", coord_scale)
    device = check_device(device)
    return default_inv_freq(head_dim // 2, base, device=device) * coord_scale


def axial_rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, axis_order: str = "xy"
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the axial angles: pair i < n rotates by the first axis' coordinate
    times ``inv_freq[i]``, pair n + i by the second's (n = ``len(inv_freq)``).

    With ``axis_order="xy"`` the first axis is x (the column, ``positions[..., 1]``), then y
    (the row, ``positions[..., 0]``); ``"yx"`` swaps them. Angles are formed in float64
    (:func:`~posenc.functional.rope_angles`) and rounded once to float32 (float64 positions
    keep float64).

    Shapes:
        positions ``[seq, 2]`` or ``[batch, seq, 2]`` (row, column), inv_freq ``[n]`` ->
        cos, sin ``[seq, 2n]`` or ``[batch, seq, 2n]``

    Example:
        >>> from posenc.positions import grid
        >>> cos, sin = axial_rope_cos_sin(grid(2, 3).double(), axial_rope_inv_freq(8))
        >>> cos.shape
        torch.Size([6, 4])
        >>> sin[5].round(decimals=4).tolist()  # row 1, column 2: sin(2θ_i), then sin(1θ_i)
        [0.9093, 0.1987, 0.8415, 0.0998]
    """
    check_choice("axis_order", axis_order, AXIS_ORDERS)
    _check_grid_positions(positions)
    check_tensor("inv_freq", inv_freq, dims=(1,))
    check_movable("inv_freq", inv_freq, positions.device)
    rows, cols = positions[..., 0], positions[..., 1]  # [(b,) s] each
    first, second = (cols, rows) if axis_order == "xy" else (rows, cols)
    cos1, sin1 = rope_cos_sin(first, inv_freq)  # [(b,) s, n]
    cos2, sin2 = rope_cos_sin(second, inv_freq)
    return torch.cat((cos1, cos2), dim=-1), torch.cat((sin1, sin2), dim=-1)


def rope_mixed_freqs(phases: torch.Tensor, head_dim: int, base: float = 10.0) -> torch.Tensor:
    """RoPE-Mixed's initial frequencies for heads turned by ``phases`` φ_h (Heo et al.'s code).

    With the magnitudes m_i = base^(-4i/head_dim), i < head_dim/4:
    ``f_x[h] = cat(m·cos φ_h, m·cos(φ_h + π/2))`` and ``f_y[h] = cat(m·sin φ_h,
    m·sin(φ_h + π/2))``: the first quarter of the pairs points along the direction φ_h of
    the image, the second quarter along the perpendicular one, so each pair i has
    ``f_x² + f_y² = m_{i mod head_dim/4}²``. Computed in the dtype of ``phases``.

    Shapes:
        phases ``[heads]`` -> ``[2, heads, head_dim // 2]`` (``[0]``: f_x, ``[1]``: f_y)

    Example:
        >>> f = rope_mixed_freqs(torch.zeros(1, dtype=torch.float64), 8)  # φ = 0: axial
        >>> f[0].round(decimals=4).tolist(), f[1].round(decimals=4).tolist()
        ([[1.0, 0.3162, 0.0, 0.0]], [[0.0, 0.0, 1.0, 0.3162]])
    """
    check_tensor("phases", phases)
    if phases.dim() != 1:
        raise ValueError(f"phases must be 1-D [heads], got shape {tuple(phases.shape)}")
    _check_head_dim(head_dim)
    check_base("base", base)
    mag = default_inv_freq(head_dim // 2, base, device=phases.device).to(phases.dtype)  # [d/4]
    phi = phases.unsqueeze(-1)  # [h, 1]
    fx = torch.cat((mag * torch.cos(phi), mag * torch.cos(phi + math.pi / 2)), dim=-1)
    fy = torch.cat((mag * torch.sin(phi), mag * torch.sin(phi + math.pi / 2)), dim=-1)
    return torch.stack((fx, fy))  # [2, h, d/2]


def rope_mixed_cos_sin(
    positions: torch.Tensor, freqs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE-Mixed's angles ``x · f_x[h, i] + y · f_y[h, i]``, per head.

    The angle is a differentiable product in float64 (float32 on Apple MPS), so gradients
    reach ``freqs`` and the phase stays exact at large coordinates; the tables are rounded
    once to float32, or kept in float64 when ``positions`` or ``freqs`` are float64 (as in a
    float64 gradcheck).

    Shapes:
        positions ``[seq, 2]`` or ``[batch, seq, 2]`` (row y, column x), freqs
        ``[2, heads, n]`` -> cos, sin ``[1, heads, seq, n]`` or ``[batch, heads, seq, n]``

    Example:
        >>> from posenc.positions import grid
        >>> cos, sin = rope_mixed_cos_sin(grid(2, 2), torch.randn(2, 3, 4))
        >>> cos.shape
        torch.Size([1, 3, 4, 4])
    """
    _check_grid_positions(positions)
    check_tensor("freqs", freqs)
    if freqs.dim() != 3 or freqs.shape[0] != 2:
        raise ValueError(f"freqs must be [2, heads, n] (f_x, f_y), got shape {tuple(freqs.shape)}")
    check_devices(positions=positions, freqs=freqs)
    out = math_dtype(positions.dtype, freqs.dtype)
    dtype = wide_dtype(positions.device)
    coords = positions.to(dtype)
    if coords.dim() == 2:
        coords = coords.unsqueeze(0)  # [1, s, 2]
    y = coords[..., 0].unsqueeze(1).unsqueeze(-1)  # [b, 1, s, 1]
    x = coords[..., 1].unsqueeze(1).unsqueeze(-1)
    f = freqs.to(dtype).unsqueeze(-2)  # [2, h, 1, n]
    angles = x * f[0] + y * f[1]  # [b, h, s, n]
    return angles.cos().to(out), angles.sin().to(out)
