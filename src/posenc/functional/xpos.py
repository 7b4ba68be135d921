"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554): the math.

RoPE plus a per-pair exponential decay. Pair i of the rotary dimension d has
ζ_i = (2i + 0.4·d) / (1.4·d) (the paper's (2i/d + γ)/(1 + γ), γ = 0.4); after the rotation a
query at position n is multiplied by ζ_i^((n - c)/scale_base) and a key at m by
ζ_i^(-(m - c)/scale_base), so pair i of ``q·k`` gains ζ_i^((n - m)/scale_base) whatever the
centre c. Positions farther than :func:`xpos_max_distance` from c raise instead of
overflowing. Why a fixed centre, and how the window is derived: ``docs/design-notes.md``,
"xPos: the centre and the window". The module :class:`posenc.rotary.XPos` holds the config.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

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
from ..host_reads import read, reads_values
from .dtypes import math_dtype, wide_dtype
from .rope import apply_rope, check_rope_inputs

__all__ = [
    "DEFAULT_SCALE_BASE",
    "GAMMA",
    "HEADROOM_BITS",
    "apply_xpos",
    "check_xpos_positions",
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
    float64 positions, as RoPE's cos/sin are. Range checks are in
    :func:`check_xpos_positions`; this function does not clamp.

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
    return _max_log2_factor(dtype) * scale_base / _LOG2_INV_ZETA_0


def _check_window(scale_base: float, center: float) -> None:
    check_float("scale_base", scale_base)
    check_float("center", center, positive=False)


def _check_float_dtype(dtype: torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def _max_log2_factor(dtype: torch.dtype) -> float:
    # in whole powers of two, so that float32 and bfloat16 (same exponent range) agree
    info = torch.finfo(dtype)
    return min(math.floor(math.log2(info.max)) - HEADROOM_BITS, -math.log2(info.tiny))


def check_xpos_positions(
    positions: torch.Tensor,
    scale_base: float = DEFAULT_SCALE_BASE,
    center: float = 0.0,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Raise ``ValueError`` if a position lies farther from ``center`` than
    :func:`xpos_max_distance` allows for ``dtype`` (skipped under ``torch.compile``).

    Shapes:
        positions ``[seq]`` or ``[batch, seq]``
    """
    check_tensor("positions", positions, kinds=("int", "float"))
    _check_window(scale_base, center)
    _check_float_dtype(dtype)
    if reads_values(positions):
        read(
            torch.stack(torch.aminmax(positions)),
            partial(_check_distance, scale_base, center, dtype),
        )


def _check_distance(scale_base: float, center: float, dtype: torch.dtype, values: list) -> None:
    low, high = (float(v) for v in values)
    worst = high if abs(high - center) >= abs(low - center) else low
    limit = xpos_max_distance(scale_base, dtype)
    if abs(worst - center) > limit:
        raise ValueError(
            f"xPos position {worst:g} is {abs(worst - center):g} from center={center:g}, "
            f"past the {limit:.0f} positions either side that {dtype} holds at "
            f"scale_base={scale_base:g} (the factor ζ^((n - center)/scale_base) would "
            f"overflow or underflow): keep positions within [{center - limit:.0f}, "
            f"{center + limit:.0f}] or set center near the middle of the positions in use"
        )


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
    ones pass through unchanged. When ``x.dtype`` holds a narrower range than the table
    (float16), a factor it cannot hold raises ``ValueError`` (skipped under compile).
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
    allowed = _max_log2_factor(x.dtype)
    if allowed < _max_log2_factor(scale.dtype) and reads_values(scale):
        read(scale.log2().abs().amax().view(1), partial(_check_factor, allowed, x.dtype))
    factor = 1 / scale if key else scale
    return kernel(x, cos * factor, sin * factor, layout)


def _check_factor(allowed: float, dtype: torch.dtype, values: list[float]) -> None:
    worst = values[0]
    if worst > allowed:
        raise ValueError(
            f"xPos factors reach 2^±{worst:.1f} but {dtype} inputs hold 2^±{allowed:.1f} "
            f"(positions within xpos_max_distance(scale_base, {dtype}) of the centre): "
            "use bfloat16 or float32, or a center nearer the positions in use"
        )
