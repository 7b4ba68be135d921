"""Forgetting attention (FoX, Lin et al. 2025, arXiv:2503.02130) on plain attention kernels.

FoX adds ``c_i − c_j`` to the score of the query ``i`` and the key ``j <= i``, where ``c``
is the forget clock of the layer's input (:mod:`posenc.functional.fox`). Softmax drops the
row constant ``c_i``: what is left is a term of the key alone, ``−c_j``, which rides in the
kernel as extra coordinates, ``q' = [q, e_β / scale]``, ``k' = [k, m_β − c_j]`` (``v``
zero-padded), so the scores are ``q·k·scale + m_β − c_j``. ``e_β`` is the one-hot of the
query's block ``β`` and ``m_β`` the clock of the block's last query: for the keys a query
sees, ``m_β − c_j <= 0`` and small for the recent keys that carry its weight, so float32
loses no more than the clock itself holds. The kernel's cost steps with the head width in
multiples of 8, so the blocks fill the width up to the next multiple (8 extra columns for
a head of 64). Any plain runner takes the extended heads (SDPA's fused kernels, flex with a
window, a dense mask), and autograd carries the gradient of ``c`` from SDPA's ``dk``: no
``[heads, L, L]`` tensor, forward or backward.

A sink or a softcap sees the row constant (a sink's logit competes with ``c_i − c_j``, not
with ``−c_j``; ``tanh`` is not shift-invariant): there, on ``backend="math"`` and where an
input is not finite (a NaN gate makes every later clock NaN, and the centred coordinates
would carry it into every row as ``0 · NaN``), the plan materialises the bias instead
(:meth:`~posenc.attn.call.Call.bias_table`).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from ..functional.dtypes import math_dtype
from .call import Call

__all__ = ["forget_call", "forget_keys"]

#: the head width the CPU kernels' cost steps by: the extra coordinates fill it up
WIDTH_STEP = 8


def forget_keys(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, clock: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v with the forget bias ``−c_j`` as extra coordinates, centred per block of
    queries (the module's docstring), in float32 (float64 for float64 inputs).

    Args:
        q: ``[b, h, q_len, d]``, the last ``q_len`` of the keys' tokens.
        k, v: ``[b, kv_h, k_len, d]``; repeated to the ``h`` query heads, whose clocks
            differ.
        clock: ``[b, h, k_len]``, the keys' forget clocks.
        scale: the score scale.

    Returns:
        ``(q', k', v')``: ``[b, h, q_len, d + n]`` and ``[b, h, k_len, d + n]``, with
        ``n = min(8 - d % 8, q_len)`` query blocks.
    """
    b, h, q_len, d = q.shape
    k_len = k.shape[2]
    work = math_dtype(q.dtype, clock.dtype)
    n = min(WIDTH_STEP - d % WIDTH_STEP, q_len)
    group = h // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    block = torch.arange(q_len, device=q.device) * n // q_len  # [q_len], 0 .. n-1
    last = torch.searchsorted(block, torch.arange(n, device=q.device), right=True) - 1  # [n]
    clock = clock.to(work)
    centres = clock[..., k_len - q_len + last]  # [b, h, n]
    q_extra = F.one_hot(block, n).to(work) / scale  # [q_len, n]
    k_extra = centres.unsqueeze(-2) - clock.unsqueeze(-1)  # [b, h, k_len, n]
    q2 = torch.cat((q.to(work), q_extra.expand(b, h, q_len, n)), dim=-1)
    k2 = torch.cat((k.to(work), k_extra), dim=-1)
    v2 = torch.cat((v.to(work), v.new_zeros((), dtype=work).expand(b, h, k_len, n)), dim=-1)
    return q2, k2, v2


def forget_call(call: Call) -> Call:
    """``call`` as plain attention: FoX's clock (``call.table``) as extra coordinates of q,
    k and v (:func:`forget_keys`), no encoding, no table; its runner's output keeps the
    first ``head_dim`` columns.

    Shapes:
        q ``[b, h, q_len, d]`` -> ``[b, h, q_len, d + n]``; k, v ``[b, kv_h, k_len, d]`` ->
        ``[b, h, k_len, d + n]`` (see :func:`forget_keys`).
    """
    q, k, clock = call.q, call.k, call.table
    assert call.encoding is not None and clock is not None, "posenc.attention checks the clock"
    if q.shape[2] > k.shape[2]:
        raise ValueError(
            f"{call.encoding.info.name}'s queries are the last of its keys' tokens: q has "
            f"{q.shape[2]} positions but k only {k.shape[2]}"
        )
    q2, k2, v2 = forget_keys(q, k, call.v, clock, call.scale)
    return replace(call, q=q2, k=k2, v=v2, encoding=None, table=None)
