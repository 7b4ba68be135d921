"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554): the math.

RoPE plus a per-pair exponential decay. Pair i of the rotary dimension d has
ζ_i = (2i + 0.4·d) / (1.4·d) (the paper's (2i/d + γ)/(1 + γ), γ = 0.4); after the rotation a
query at position n is multiplied by ζ_i^((n - c)/scale_base) and a key at m by
ζ_i^(-(m - c)/scale_base), so pair i of ``q·k`` gains ζ_i^((n - m)/scale_base) whatever the
centre c. Positions farther than :func:`xpos_max_distance` from c raise instead of
overflowing. Why a fixed centre, and how the window is derived: ``docs/design-notes.md``,
"xPos: the centre and the window". The module :class:`posenc.rotary.XPos` holds the config.

Pure math: these functions check shapes, dtypes and devices, never a tensor's values (no
host read). The range checks that read values live with the module that takes positions
from a user: :func:`posenc.rotary.xpos.check_xpos_positions` (the window, in
``XPos.check_positions``) and ``XPos.rotate`` (the factors a float16 input holds), both
bounded by :func:`xpos_max_distance` and :func:`xpos_factor_bound`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..arguments import (
    check_bool,
    check_callable,
    check_device,
    check_devices,
    check_float,
    check_int,
    check_movable,
    check_tensor,
)
from .dtypes import math_dtype, wide_dtype
from .rope import apply_rope, check_rope_inputs

__all__ = [
    "DEFAULT_SCALE_BASE",
    "GAMMA",
    "HEADROOM_BITS",
    "apply_xpos",
    "xpos_factor_bound",
    "xpos_max_distance",
    "xpos_scale",
    "xpos_zeta",
]

DEFAULT_SCALE_BASE = 512.0
#: γ of the paper: ζ_i = (2i/d + γ) / (1 + γ)
GAMMA = 0.4
#: bits kept free below a dtype's largest finite value, for the magnitude of q and k
HEADROOM_BITS = 8
#: log2(1/ζ_0) = log2((1 + γ)/γ): the fastest-decaying pair, which bounds the window
_LOG2_INV_ZETA_0 = math.log2((1 + GAMMA) / GAMMA)


def xpos_zeta(rotary_dim: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The per-pair decay bases ζ_i = (2i + 0.4·d)/(1.4·d), in float64 (float32 on MPS).

    Sun et al. 2022, arXiv:2212.10554 (γ = 0.4). ζ_0 = 2/7 and ζ_i -> 1 as i -> d/2.

    Shapes:
        returns ``[rotary_dim // 2]``
    """
    check_int("rotary_dim", rotary_dim, minimum=2, even=True)
    device = check_device(device) or torch.device("cpu")
    i = torch.arange(rotary_dim // 2, device=device, dtype=wide_dtype(device))
    return (2 * i + GAMMA * rotary_dim) / ((1 + GAMMA) * rotary_dim)


def xpos_scale(
    positions: torch.Tensor,
    zeta: torch.Tensor,
    scale_base: float = DEFAULT_SCALE_BASE,
    center: float = 0.0,
) -> torch.Tensor:
    """The query factors ζ_i^((n - center)/scale_base) of each position (keys use 1/them).

    Computed in float64 (float32 on MPS) and rounded once to float32, or kept in float64 for
    float64 positions, as RoPE's cos/sin are. It reads no value and does not clamp: the
    range check is :func:`posenc.rotary.xpos.check_xpos_positions`.

    Shapes:
        positions ``[...]`` (``[seq]`` or ``[batch, seq]``), zeta ``[n]`` -> ``[..., n]``
    """
    check_tensor("positions", positions, kinds=("int", "float"))
    check_tensor("zeta", zeta, dims=(1,))
    check_movable("zeta", zeta, positions.device)
    _check_window(scale_base, center)
    dtype = wide_dtype(positions.device)
    out = math_dtype(positions.dtype)
    exponents = (positions.to(dtype) - center) / scale_base  # [...]
    return (zeta.to(positions.device, dtype) ** exponents.unsqueeze(-1)).to(out)  # [..., n]


def xpos_max_distance(
    scale_base: float = DEFAULT_SCALE_BASE, dtype: torch.dtype = torch.float32
) -> float:
    """The largest |position - center| whose xPos factors ``dtype`` holds.

    Every factor ζ_i^(±(n - c)/scale_base) and its inverse must be a normal number at least
    ``2**HEADROOM_BITS`` below ``dtype``'s largest finite value. ζ_0 = 2/7 decays fastest, so
    the bound is ``min(floor(log2(max)) - 8, -log2(tiny)) · scale_base / log2(7/2)``: 33,711
    for float32 and bfloat16 (2^±119), 1,983 for float16 (2^±7) at scale_base 512; it does not
    depend on head_dim.
    """
    check_float("scale_base", scale_base)
    _check_float_dtype(dtype)
    return xpos_factor_bound(dtype) * scale_base / _LOG2_INV_ZETA_0


def _check_window(scale_base: float, center: float) -> None:
    check_float("scale_base", scale_base)
    check_float("center", center, positive=False)


def _check_float_dtype(dtype: torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def xpos_factor_bound(dtype: torch.dtype) -> float:
    """The largest ``|log2|`` of an xPos factor that ``dtype`` holds: a normal number at least
    ``2**HEADROOM_BITS`` below the largest finite value, in whole powers of two (so float32
    and bfloat16, of one exponent range, agree): 119 for float32 and bfloat16, 7 for
    float16."""
    _check_float_dtype(dtype)
    info = torch.finfo(dtype)
    return min(math.floor(math.log2(info.max)) - HEADROOM_BITS, -math.log2(info.tiny))


def apply_xpos(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    scale: torch.Tensor,
    layout: str = "half",
    key: bool = False,
    kernel: Callable[..., torch.Tensor] = apply_rope,
) -> torch.Tensor:
    """Rotate the pairs of ``x`` (RoPE) and multiply them by ``scale`` (queries) or
    ``1/scale`` (keys).

    Both elements of a pair get the same factor, and a rotation commutes with a scalar, so
    the factor is folded into cos and sin: the result is
    :func:`~posenc.functional.apply_rope` with ``(cos·f, sin·f)``, computed in float32
    (float64 for float64 input) and rounded once to ``x.dtype``. Dimensions past the rotary
    ones pass through unchanged. Pure math: it reads no value, so a factor that ``x.dtype``
    cannot hold (float16 past :func:`xpos_factor_bound`) is not refused here but by
    ``XPos.rotate``, the module's entry, which reads the factors once.
    ``kernel`` rotates: :func:`~posenc.functional.apply_rope` (the default) or an equal,
    faster one (:func:`~posenc.functional.rope_kernel.apply_rope_fast`).

    Sun et al. 2022, arXiv:2212.10554.

    Shapes:
        x ``[batch, heads, seq, head_dim]``; cos, sin, scale ``[seq, n]`` or
        ``[batch, seq, n]`` with ``2n <= head_dim`` -> ``[batch, heads, seq, head_dim]``
    """
    check_rope_inputs(x, cos, sin, layout)
    check_tensor("scale", scale)
    check_devices(x=x, scale=scale)
    if scale.shape != cos.shape:
        raise ValueError(
            f"scale must have the shape of cos and sin, {tuple(cos.shape)}, got "
            f"{tuple(scale.shape)}"
        )
    check_bool("key", key)
    check_callable("kernel", kernel)
    factor = 1 / scale if key else scale
    return kernel(x, cos * factor, sin * factor, layout)
