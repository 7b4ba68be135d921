"""Shaw's relation-aware attention that trains on the CPU without ``[batch, heads, L, L]``.

Shaw et al. 2018 (arXiv:1803.02155) score ``q_i · (k_j + a^K[r_ij]) · scale`` and, with value
vectors, output ``sum_j P_ij (v_j + a^V[r_ij])``, with ``r_ij = clip(p_j - p_i, -k, k) + k``
the table row of the clipped distance. :func:`shaw_attention` runs both over blocks of
``block`` queries, forward and backward, as FlashAttention-2 does (Dao 2023,
arXiv:2307.08691, Algorithms 1 and 2): per block, the key term is gathered from
``R = q_blk a^Kᵀ · scale`` (``[.., blk, 2k + 1]``, one score per distance bin), the value
term is the probabilities summed into their ``2k + 1`` bins times ``a^V``; the forward keeps
only q, k, v, the tables, the output and the log-sum-exp of every row, and the backward
recomputes each block's probabilities from them. The gradients of the tables are summed
per distance bin (``da^K = Σ binsum(dS)ᵀ q · scale``, ``da^V = Σ binsum(P)ᵀ dO``).

The math runs in float32 (float64 for float64 inputs). This is the place a GPU kernel
would plug in; the CPU path imports no Triton.
"""

from __future__ import annotations

import functools
from types import EllipsisType
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.function import once_differentiable

from ...base import BiasEncoding, RelativeTables
from ...functional.dtypes import math_dtype
from ..kernels.flash_blocks import FLASH_OP, bias_flash_available, block_size, check_blockwise
from ..kernels.shaw_bins import (
    band_masks,
    bin_blocks,
    bin_sum,
    block_bounds,
    consecutive_shift,
    spread,
)

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["BLOCK", "key_terms", "shaw", "shaw_attention"]

#: queries per block: the forward and the backward hold ``[batch, heads, BLOCK, k_len]``
BLOCK = 64


def shaw_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_table: torch.Tensor,
    value_table: torch.Tensor | None,
    max_distance: int,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    scale: float,
    causal: bool,
    block: int = BLOCK,
    shift: int | EllipsisType | None = ...,
    *,
    terms: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + q a^K[r]ᵀ · scale) (v + a^V[r])`` blockwise, forward and backward.

    Args:
        q: ``[batch, heads, q_len, d]``, float64, float32, bfloat16 or float16.
        k, v: ``[batch, kv_heads, k_len, d]`` with ``heads`` a multiple of ``kv_heads``
            (grouped-query heads are repeated here; autograd sums their gradients back).
        key_table: ``a^K``, ``[2 * max_distance + 1, d]``, shared by the heads.
        value_table: ``a^V`` of the same shape, or None (no value term).
        max_distance: the clipping distance ``k``.
        q_positions, k_positions: integer positions, ``[len]`` or ``[batch, len]``: the
            distance of a pair is ``k_position - q_position``.
        scale: the score scale (it multiplies the key term too, as in eq. 4).
        causal: mask keys after their query by index (``q_len == k_len``; the positions
            must order the keys as their index does).
        block: queries per block.
        shift: ``k_position - q_position - (j - i)`` when the positions are consecutive
            ``[len]`` each, None when not (:meth:`AttnPositions.shift
            <posenc.positions.record.AttnPositions.shift>`); default (``...``): read here.
        terms: :func:`key_terms` of ``key_table`` in the math dtype and ``scale``, where the
            caller keeps them from one call to the next (read with no value table and
            consecutive positions, where no backward follows), or None: computed here.

    Returns:
        ``[batch, heads, q_len, d]`` in the dtype of ``q``.

    Example:
        >>> q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
        >>> a_k = torch.zeros(3, 4, requires_grad=True)
        >>> out = shaw_attention(q, k, v, a_k, None, 1, torch.arange(5), torch.arange(5),
        ...                      0.5, True)
        >>> out.sum().backward(); a_k.grad.shape
        torch.Size([3, 4])
    """
    k, v = check_blockwise(q, k, v, causal, block)
    b, _, q_len, d = q.shape
    k_len = k.shape[2]
    rows = 2 * max_distance + 1
    for name, table in (("key_table", key_table), ("value_table", value_table)):
        if table is not None and tuple(table.shape) != (rows, d):
            raise ValueError(
                f"{name} must be [2 * max_distance + 1, d] = [{rows}, {d}], "
                f"got {tuple(table.shape)}"
            )
    for name, pos, n in (("q_positions", q_positions, q_len), ("k_positions", k_positions, k_len)):
        if (
            pos.is_floating_point()
            or pos.dim() not in (1, 2)
            or pos.shape[-1] != n
            or (pos.dim() == 2 and pos.shape[0] != 1 and pos.shape[0] != b)
        ):
            raise ValueError(
                f"{name} must be integer [{n}] or [{b} | 1, {n}], got {pos.dtype} "
                f"{tuple(pos.shape)}"
            )
    # [b | 1, 1, len]: the pair's distance bin is computed per block from these
    qp = q_positions.reshape(-1, 1, q_len)
    kp = k_positions.reshape(-1, 1, k_len)
    if shift is ...:
        shift = consecutive_shift(q_positions, k_positions)
    meta = (max_distance, shift, float(scale), bool(causal), block)
    args = (q, k, v, key_table, value_table, qp, kp, meta)
    tensors = (q, k, v, key_table, value_table)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return _ShawFlash.apply(*args)
    return _ShawFlash.forward(_NoBackward(), *args, terms)  # no autograd node to build


def key_terms(key_table: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernel path takes of the key table: the first bin's row ``a^K[0] · scale``
    (the reference every score is taken against) and each bin over it,
    ``((a^K - a^K[0]) · scale)ᵀ``.

    Shapes:
        key_table ``[2k + 1, d]`` -> ``([d], [d, 2k + 1])``
    """
    return key_table[0] * scale, ((key_table - key_table[:1]) * scale).T


class _NoBackward:
    """The context of a forward no backward will follow: it keeps nothing."""

    def save_for_backward(self, *tensors: torch.Tensor | None) -> None:
        pass


class _ShawFlash(torch.autograd.Function):
    """The blockwise forward and FlashAttention-2 backward of Shaw's attention."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_table: torch.Tensor,
        value_table: torch.Tensor | None,
        qp: torch.Tensor,
        kp: torch.Tensor,
        meta: tuple[int, int | None, float, bool, int],
        terms: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        max_distance, shift, scale, causal, block = meta
        tables = (key_table, value_table)
        dtype = math_dtype(q.dtype, *(t.dtype for t in tables if t is not None))
        b, h, q_len, d = q.shape
        a_k = key_table.to(dtype)
        a_v = None if value_table is None else value_table.to(dtype)
        if a_v is None and shift is not None and bias_flash_available():
            q4, k4, v4 = (_dense(t.to(dtype)) for t in (q, k, v))
            out, lse = _kernel_forward(q4, k4, v4, a_k, meta, terms)
            ctx.save_for_backward(q, k, v, key_table, value_table, qp, kp, out, lse)
            ctx.meta = meta
            return out.view(b, h, q_len, d).to(q.dtype)
        q3, k3, v3 = (t.to(dtype).reshape(b * h, -1, d) for t in (q, k, v))
        out = torch.empty(b * h, q_len, d, dtype=dtype, device=q.device)
        lse = torch.empty(b * h, q_len, 1, dtype=dtype, device=q.device)
        for i0, i1, n, band in bin_blocks(qp, kp, shift, q_len, max_distance, causal, block, b, h):
            p = _scores(q3[:, i0:i1], k3[:, :n], a_k, band, scale, causal, i0)
            top = p.amax(-1, keepdim=True)
            p = p.sub_(top).exp_()
            total = p.sum(-1, keepdim=True)
            p = p.div_(total)
            lse[:, i0:i1] = top + total.log()
            o = torch.bmm(p, v3[:, :n])
            if a_v is not None:
                o.add_(bin_sum(p, band, a_v.shape[0]) @ a_v)
            out[:, i0:i1] = o
        ctx.save_for_backward(q, k, v, key_table, value_table, qp, kp, out, lse)
        ctx.meta = meta
        return out.view(b, h, q_len, d).to(q.dtype)

    @staticmethod
    @once_differentiable  # a second derivative would need the backward's own graph
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, key_table, value_table, qp, kp, out, lse = ctx.saved_tensors
        max_distance, shift, scale, causal, block = ctx.meta
        dtype = out.dtype
        b, h, q_len, d = q.shape
        k_len = k.shape[2]
        q3, k3, v3 = (t.to(dtype).reshape(b * h, -1, d) for t in (q, k, v))
        g3 = grads[0].to(dtype).reshape(b * h, q_len, d)
        a_k = key_table.to(dtype)
        a_v = None if value_table is None else value_table.to(dtype)
        rows = a_k.shape[0]
        delta = (g3 * out).sum(-1, keepdim=True)  # D = rowsum(dO ⊙ O), [b·h, q_len, 1]
        gq = torch.empty(b * h, q_len, d, dtype=dtype, device=q.device)
        gk = torch.zeros(b * h, k_len, d, dtype=dtype, device=q.device)
        gv = torch.zeros(b * h, k_len, d, dtype=dtype, device=q.device)
        ga_k = torch.zeros(rows, d, dtype=dtype, device=q.device)
        ga_v = None if a_v is None else torch.zeros(rows, d, dtype=dtype, device=q.device)
        for i0, i1, n, band in bin_blocks(qp, kp, shift, q_len, max_distance, causal, block, b, h):
            qb, gb = q3[:, i0:i1], g3[:, i0:i1]  # [b·h, blk, d]
            p = _scores(qb, k3[:, :n], a_k, band, scale, causal, i0)
            p = p.sub_(lse[:, i0:i1]).exp_()  # P, [b·h, blk, n]
            gv[:, :n].baddbmm_(p.transpose(1, 2), gb)
            dp = torch.bmm(gb, v3[:, :n].transpose(1, 2))
            if a_v is not None and ga_v is not None:
                ga_v += bin_sum(p, band, rows).flatten(0, 1).T @ gb.flatten(0, 1)
                spread(gb @ a_v.T, band, n, out=dp)  # + dO · a^V[r_ij]
            ds = p.mul_(dp.sub_(delta[:, i0:i1]))  # dS = P ⊙ (dP - D), in P's memory
            d_r = bin_sum(ds, band, rows)  # dR, [b·h, blk, 2k + 1]
            gq[:, i0:i1] = torch.bmm(ds, k3[:, :n]).add_(d_r @ a_k)
            ga_k += d_r.flatten(0, 1).T @ qb.flatten(0, 1)
            gk[:, :n].baddbmm_(ds.transpose(1, 2), qb)
        need = ctx.needs_input_grad
        return (
            gq.mul_(scale).view(q.shape).to(q.dtype) if need[0] else None,
            gk.mul_(scale).view(k.shape).to(k.dtype) if need[1] else None,
            gv.view(v.shape).to(v.dtype) if need[2] else None,
            ga_k.mul_(scale).to(key_table.dtype) if need[3] else None,
            None if ga_v is None or not need[4] else ga_v.to(value_table.dtype),
            *(None,) * 3,
        )


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` laid out as ``[b·h, len, d]`` and back gives it (a contiguous ``t`` as it is, no
    view taken): the layout the kernel path reads."""
    b, h, _, d = t.shape
    return t if t.is_contiguous() else t.reshape(b * h, -1, d).view(t.shape)


def _kernel_forward(q, k, v, a_k, meta, terms=None):
    """The forward over consecutive positions without a value table on the CPU flash kernel,
    a block of :func:`~posenc.attn.kernels.flash_blocks.block_size` queries at a time, in up
    to three calls: the keys farther left than ``max_distance`` from every query of the
    block (all in the first distance bin: a per-row constant, the reference the others are
    taken against, so no bias at all), the band around the diagonal with its bias ``q
    a^K[r]ᵀ · scale`` read from ``2k + 1`` values per query through a skewed view
    (:func:`~posenc.attn.kernels.shaw_bins.band_masks`; ``-inf`` past the query, causal),
    and (not causal) the keys farther right (the last bin: another per-row constant, added
    to their log-sum-exp). The calls write into one output and log-sum-exp per part, merged
    once for every row at the end: the glue costs a few operations per block, not a dozen.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, h, k_len, d]`` in the math dtype ->
        ``(out [b·h, q_len, d], lse [b·h, q_len, 1])``, the log-sum-exp of the full scores.
    """
    max_distance, shift, scale, causal, _ = meta
    kernel = getattr(torch.ops.aten, FLASH_OP)
    b, h, q_len, d = q.shape
    first, over_first = key_terms(a_k, scale) if terms is None else terms
    left = q @ first  # [b, h, q_len]: every key before lo, the reference
    bins = q @ over_first  # [b, h, q_len, 2k + 1]: each bin over it
    blocks = list(block_bounds(shift, q_len, k.shape[2], max_distance, causal, block_size(q_len)))
    masks = band_masks(bins, blocks, shift, max_distance, causal)
    (_, _, n, lo, hi), *more = blocks
    if not more and lo == 0 and hi == n:  # one call over the band alone: no parts to merge
        kb, vb = (t if n == t.shape[2] else t[:, :, :n] for t in (k, v))
        o, lse = kernel(q, kb, vb, 0.0, False, attn_mask=next(masks), scale=scale)[:2]
        return o.reshape(b * h, q_len, d), (lse + left).reshape(b * h, q_len, 1)
    parts = 2 if causal else 3  # the band, the keys farther left, farther right
    outs = q.new_empty(parts, b, h, q_len, d)
    lses = q.new_full((parts, b, h, q_len), float("-inf"))
    for (i0, i1, n, lo, hi), mask in zip(blocks, masks, strict=True):
        calls = ((lo, hi, mask), (0, lo, None), (hi, n, None))
        for part, (k0, k1, part_mask) in enumerate(calls[:parts]):
            if k1 > k0:
                qb, kb, vb = q[:, :, i0:i1], k[:, :, k0:k1], v[:, :, k0:k1]
                o, lse = kernel(qb, kb, vb, 0.0, False, attn_mask=part_mask, scale=scale)[:2]
                outs[part, :, :, i0:i1], lses[part, :, :, i0:i1] = o, lse
            else:  # no keys: a share of 0 (its log-sum-exp stays -inf) of a finite output
                outs[part, :, :, i0:i1] = 0.0
    if not causal:  # the keys farther right are in the last bin
        lses[2] += bins[..., -1]
    total = functools.reduce(torch.logaddexp, lses)  # 2-3 parts: elementwise, no reduction
    weights = lses.sub_(total).exp_().unsqueeze(-1)  # each part's share of the row
    out = torch.mul(outs[0], weights[0])
    for o, w in zip(outs[1:], weights[1:], strict=True):
        out.addcmul_(o, w)
    return out.view(b * h, q_len, d), total.add_(left).view(b * h, q_len, 1)


def _scores(qb, kn, a_k, band, scale, causal, i0):
    """``q kᵀ · scale + q a^K[r]ᵀ · scale`` of one block, ``-inf`` past the query under the
    causal mask: ``[b·h, blk, d]``, ``[b·h, n, d]`` -> ``[b·h, blk, n]``."""
    s = spread(qb @ a_k.T, band, kn.shape[1])  # the key term, scaled with the scores:
    s = s.baddbmm_(qb, kn.transpose(1, 2), beta=scale, alpha=scale)
    if causal:  # the diagonal block: keys after their query
        blk = qb.shape[1]
        later = torch.ones(blk, blk, dtype=torch.bool, device=qb.device).triu(1)
        s[:, :, i0:].masked_fill_(later, float("-inf"))
    return s


def shaw(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`shaw_attention` over the encoding's relative tables, with the
    key table's :func:`key_terms` computed once per scale, dtype and device while the
    encoding is unchanged (:meth:`~posenc.base.BiasEncoding.derived`)."""
    enc = call.encoding
    assert isinstance(enc, RelativeTables), "the plan gives 'shaw' to RelativeTables"
    assert isinstance(enc, BiasEncoding), "RelativeTables is a bias encoding's protocol"
    key_table, value_table, max_distance = enc.relative_tables()
    p = call.context.positions
    terms = None
    if value_table is None:
        dtype, scale = math_dtype(call.q.dtype, key_table.dtype), call.scale
        key = ("shaw key terms", scale, dtype, key_table.device)
        terms = enc.derived(key, lambda: key_terms(key_table.to(dtype), scale))
    return shaw_attention(
        call.q,
        call.k,
        call.v,
        key_table,
        value_table,
        max_distance,
        p.q,
        p.k,
        call.scale,
        call.causal,
        shift=p.shift(),  # read with the positions' other facts
        terms=terms,
    )
