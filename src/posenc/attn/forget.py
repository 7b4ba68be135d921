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
would carry it into every row as ``0 · NaN``), the bias is materialised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..base import BiasEncoding
from ..functional.dtypes import math_dtype
from ..functional.fox import forget_bias
from .context import AttentionContext
from .explicit import explicit_attention
from .masks import zero_dead_rows
from .pattern import ScoreOptions
from .plain import plain_attention

__all__ = ["forget_attention", "forget_keys"]

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


def forget_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding,
    context: AttentionContext,
    *,
    causal: bool,
    scale: float,
    backend: str,
    table: torch.Tensor | None,
    options: ScoreOptions,
    finite: bool,
) -> torch.Tensor:
    """Causal attention with the forget bias ``c_i − c_j`` of the clock ``table``; the
    arguments of :func:`~posenc.attn.bias.bias_attention`.

    Args:
        q, k, v, scale, backend: as :func:`posenc.attention` (checked there).
        encoding: an encoding with ``needs_input`` (FoX), named in errors.
        table: ``[batch, heads, k_len]``, the keys' forget clocks (``encoding.clock(x)``,
            checked by :func:`posenc.attention`); the queries are the last ``q_len`` keys.
        context: the positions and masks of this call.
        causal: must be True: the gates decay the past, a later key has no bias.
        options: the window or chunk, softcap and sinks.
        finite: whether q, k, v and the clock are all finite: else the bias is
            materialised on the explicit path, where a later token's NaN reaches no earlier
            row.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]`` -> ``[b, h, q_len, d]`` in the
        dtype of ``q``.
    """
    if not causal:
        raise ValueError(
            f"{encoding.info.name}'s forget gates decay the past: it defines no bias for "
            "later keys, so it runs causal attention only (causal=True)"
        )
    assert table is not None, "posenc.attention checks that the clock is given"
    clock, q_len, d = table, q.shape[2], q.shape[-1]
    if q_len > k.shape[2]:
        raise ValueError(
            f"{encoding.info.name}'s queries are the last of its keys' tokens: q has {q_len} "
            f"positions but k only {k.shape[2]}"
        )
    # a non-finite clock or input: its centred coordinates would carry 0 · NaN to every row
    if not finite or backend == "math" or options.softcap is not None or options.sinks is not None:
        bias = forget_bias(clock[..., clock.shape[-1] - q_len :], clock)  # [b, h, q, k]
        allowed = context.allowed(causal, options.pattern)
        mask, dead = (None, None) if allowed is None else allowed
        out = explicit_attention(
            q, k, v, scale, bias=bias, allowed=mask, softcap=options.softcap, sinks=options.sinks
        )
        return zero_dead_rows(out, dead)
    q2, k2, v2 = forget_keys(q, k, v, clock, scale)
    out = plain_attention(q2, k2, v2, context, causal, scale, backend, options, finite)
    return out[..., :d].to(q.dtype)
