"""ALiBi, attention with linear biases (Press et al. 2022, "Train Short, Test Long",
arXiv:2108.12409).

No positional embedding anywhere: each head adds ``-m_h · (i - j)`` to the score of query
``i`` and key ``j``, after the ``1/sqrt(d)`` scaling (the bias is never scaled), with fixed
per-head slopes ``m_h``. For ``n`` a power of two the slopes are the geometric sequence
``2^(-8/n), 2^(-16/n), ..., 2^(-8)``; for other ``n`` they are the ``c`` slopes of the
closest lower power of two ``c``, then the even-indexed slopes (0, 2, 4, ...) of the ``2c``
sequence, ``n - c`` of them (the paper's reference code; BLOOM's ``build_alibi_tensor``).

The slopes and the bias only: attention runs ALiBi inside the fused CPU kernels of SDPA in
:mod:`posenc.attn.runners.linear`.
"""

from __future__ import annotations

import torch

from ..arguments import (
    check_bool,
    check_device,
    check_devices,
    check_dtype,
    check_int,
    check_tensor,
)

__all__ = ["alibi_bias", "alibi_slope", "alibi_slopes"]


def alibi_slope(head: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The slope of each head index in ``head``, elementwise, for a model of ``n_heads``.

    With ``c`` the largest power of two <= ``n_heads``: ``2^(-8 (h + 1) / c)`` for
    ``h < c``, else ``2^(-4 (2 (h - c) + 1) / c)`` (the odd powers of the ``2c`` sequence).
    Every exponent is exact in binary, so the result is ``exp2`` rounded once to ``head``'s
    floating dtype (pass float64 indices and cast for correctly rounded float32 slopes).

    Shapes:
        head: ``[...]`` floating head indices in ``[0, n_heads)`` -> ``[...]``.
    """
    check_tensor("head", head)
    check_int("n_heads", n_heads)
    c = 1 << (n_heads.bit_length() - 1)
    first = (head + 1) * (-8.0 / c)
    extra = (2 * (head - c) + 1) * (-4.0 / c)
    return torch.exp2(torch.where(head < c, first, extra))


def alibi_slopes(
    n_heads: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The ALiBi slopes of ``n_heads`` heads (8 heads: 1/2, 1/4, ..., 1/256).

    Computed in float64 (the exponents are exact and ``exp2`` is rounded once), then cast
    to ``dtype``: float64 by default, so ``.float()`` gives correctly rounded float32 values.

    Shapes:
        returns ``[n_heads]``.
    """
    check_int("n_heads", n_heads)
    device = check_device(device)
    check_dtype("dtype", dtype)
    heads = torch.arange(n_heads, device=device, dtype=torch.float64)
    return alibi_slope(heads, n_heads).to(dtype)


def alibi_bias(
    slope: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    symmetric: bool = False,
) -> torch.Tensor:
    """The ALiBi bias ``-slope · (q_pos - k_pos)``, or ``-slope · |q_pos - k_pos|`` when
    ``symmetric`` (bidirectional encoders). Farther keys always get lower scores.

    The causal form is meant for causal attention: a key after the query (``k_pos > q_pos``)
    would get a positive bias growing with distance. Integer positions are subtracted
    exactly before the cast to ``slope.dtype``; differentiable in ``slope`` and in floating
    positions.

    Shapes:
        slope, q_pos, k_pos: broadcastable -> their broadcast shape, ``slope.dtype``.
    """
    check_tensor("slope", slope)
    check_tensor("q_pos", q_pos, kinds=("int", "float"))
    check_tensor("k_pos", k_pos, kinds=("int", "float"))
    check_devices(slope=slope, q_pos=q_pos, k_pos=k_pos)
    check_bool("symmetric", symmetric)
    if q_pos.is_floating_point() or k_pos.is_floating_point():
        distance = q_pos.to(slope.dtype) - k_pos.to(slope.dtype)
    else:
        distance = (q_pos - k_pos).to(slope.dtype)
    if symmetric:
        distance = distance.abs()
    return -slope * distance
