"""Sinusoidal positional encoding (Vaswani et al. 2017, "Attention Is All You Need", §3.5,
arXiv:1706.03762).

    PE(pos, 2i)     = sin(pos / base^(2i/dim))
    PE(pos, 2i + 1) = cos(pos / base^(2i/dim))

Wavelengths grow geometrically from 2π to 2π·base^((dim-2)/dim). Values are bounded in [-1, 1], and
PE(pos + k) is a fixed linear map of PE(pos) (a rotation of each (sin, cos) pair by k·ω_i).
"""

from __future__ import annotations

import torch

from ..arguments import (
    check_choice,
    check_device,
    check_dtype,
    check_float,
    check_int,
    check_tensor,
)
from .dtypes import math_dtype
from .rope import rope_angles

__all__ = ["SINUSOIDAL_LAYOUTS", "sin_cos_encoding", "sinusoidal", "sinusoidal_inv_freq"]

#: ``interleaved``: sin on even columns, cos on odd (the paper, the article's module);
#: ``concat``: all sines, then all cosines (tensor2tensor, fairseq).
SINUSOIDAL_LAYOUTS = ("interleaved", "concat")


def sinusoidal_inv_freq(
    dim: int,
    base: float = 10000.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The angular frequencies ω_i = base^(-2i/dim), i = 0 .. dim/2 - 1.

    Shapes:
        returns ``[dim // 2]``
    """
    check_int("dim", dim, minimum=2, even=True)
    check_float("base", base)
    device = check_device(device)
    check_dtype("dtype", dtype)
    exponents = torch.arange(0, dim, 2, device=device, dtype=dtype) / dim
    return base**-exponents


def sinusoidal(
    positions: torch.Tensor,
    dim: int,
    base: float = 10000.0,
    layout: str = "interleaved",
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The sinusoidal encoding of each position (integer or fractional, any size).

    Args:
        positions: any shape, integer or float.
        dim: the encoding size (even).
        base: the wavelength base (10000 in the paper).
        layout: ``"interleaved"`` or ``"concat"`` (see :data:`SINUSOIDAL_LAYOUTS`).
        dtype: the result dtype; default float32, float64 for float64 positions. The angles
            are formed in float64 and reduced modulo 2π first (as for RoPE), so position
            1e6 keeps its phase; a float32 product is off by ~1e-2 there.

    Shapes:
        positions: ``[...]`` -> returns ``[..., dim]``
    """
    check_tensor("positions", positions, kinds=("int", "float"))
    inv_freq = sinusoidal_inv_freq(dim, base, device=positions.device, dtype=torch.float64)
    return sin_cos_encoding(positions, inv_freq, layout, dtype=dtype)


def sin_cos_encoding(
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    layout: str = "interleaved",
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """sin and cos of ``positions · inv_freq`` laid out as :func:`sinusoidal` does: the step
    shared by every sinusoidal encoding (positions, timestamps), whatever its frequencies.

    Angles are formed in float64 and reduced modulo 2π, then rounded to ``dtype`` (default
    float32, float64 for float64 positions).

    Shapes:
        positions ``[...]``, inv_freq ``[n]`` -> ``[..., 2n]``
    """
    check_tensor("positions", positions, kinds=("int", "float"))
    check_choice("layout", layout, SINUSOIDAL_LAYOUTS)
    if dtype is not None:
        check_dtype("dtype", dtype)
    else:
        dtype = math_dtype(positions.dtype)
    angles = rope_angles(positions, inv_freq).to(dtype)  # [..., n], exact mod 2π; checks both
    sin, cos = angles.sin(), angles.cos()
    if layout == "interleaved":
        return torch.stack((sin, cos), dim=-1).flatten(-2)  # [..., n, 2] -> [..., 2n]
    return torch.cat((sin, cos), dim=-1)
