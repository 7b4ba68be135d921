"""The Triton program behind :mod:`posenc.functional.rope_triton` and its launch: one
program turns a block of positions of every head of q and k (and, writing a cache, copies
the values), its angles computed once for the block from the positions and the inverse
frequencies (float64, reduced mod 2π, as :func:`~posenc.functional.rope.rope_cos_sin`) or
loaded from an encoding's float32 tables; :class:`TritonRope` is its autograd Function,
whose backward is the same program with the sign of the sine flipped (Su et al. 2021,
arXiv:2104.09864).
"""

from __future__ import annotations

import math
from typing import Any

import torch

try:  # an optional dependency: posenc never needs it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

__all__ = ["BLOCK_S", "DTYPES", "TritonRope", "launch", "triton_available"]

#: positions per program: each program turns these positions of every head of q and k
BLOCK_S = 16
#: the dtypes the kernel rotates (float64 stays on the torch path, which keeps it)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def triton_available() -> bool:
    """Whether Triton imports (a GPU, or its interpreter, then runs the kernel)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _rotate_heads(
        x_ptr, out_ptr, heads, b, s_idx, dst_idx, s_ok, dst_ok, d1, d2, pair_ok, cos, sin,
        rest, rest_ok, stride_xb, stride_xh, stride_xs, stride_xd, stride_ob, stride_oh, stride_os,
        stride_od, COPY: tl.constexpr,
    ):  # fmt: skip
        """Turn the pairs ``(d1, d2)`` of positions ``s_idx`` of every head of one tensor
        into rows ``dst_idx`` of the output (those where ``dst_ok``: no other row is
        written), and copy its channels ``rest`` through (unless the output is the
        input). Rounded to the input's dtype, then the output's."""
        m = s_ok[:, None] & pair_ok[None, :]
        mr = s_ok[:, None] & rest_ok[None, :]
        md = dst_ok[:, None] & pair_ok[None, :]
        mdr = dst_ok[:, None] & rest_ok[None, :]
        for h in range(0, heads):
            src = x_ptr + b * stride_xb + h * stride_xh + s_idx[:, None] * stride_xs
            dst = out_ptr + b * stride_ob + h * stride_oh + dst_idx[:, None] * stride_os
            x1 = tl.load(src + d1[None, :] * stride_xd, mask=m, other=0.0)
            x2 = tl.load(src + d2[None, :] * stride_xd, mask=m, other=0.0)
            a = x1.to(tl.float32)
            c = x2.to(tl.float32)
            o1 = (a * cos - c * sin).to(x1.dtype).to(out_ptr.dtype.element_ty)
            o2 = (c * cos + a * sin).to(x1.dtype).to(out_ptr.dtype.element_ty)
            tl.store(dst + d1[None, :] * stride_od, o1, mask=md)
            tl.store(dst + d2[None, :] * stride_od, o2, mask=md)
            if COPY:
                kept = tl.load(src + rest[None, :] * stride_xd, mask=mr, other=0.0)
                kept = kept.to(out_ptr.dtype.element_ty)
                tl.store(dst + rest[None, :] * stride_od, kept, mask=mdr)

    @triton.jit
    def _rope_kernel(
        q_ptr, k_ptr, v_ptr, q_out_ptr, k_out_ptr, v_out_ptr, pos_ptr, freq_ptr, cos_ptr,
        sin_ptr, slot_ptr, consts_ptr, q_heads, k_heads, v_heads, seq, cache_len,
        stride_pb, stride_ps, stride_tb, stride_ts, stride_tp,
        stride_qb, stride_qh, stride_qs, stride_qd,
        stride_kb, stride_kh, stride_ks, stride_kd,
        stride_vb, stride_vh, stride_vs, stride_vd,
        stride_qob, stride_qoh, stride_qos, stride_qod,
        stride_kob, stride_koh, stride_kos, stride_kod,
        stride_vob, stride_voh, stride_vos, stride_vod,
        PAIRS: tl.constexpr, BLOCK_P: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, OFFSET: tl.constexpr,
        HALF: tl.constexpr, ANGLES: tl.constexpr, SLOTS: tl.constexpr, COPY: tl.constexpr,
        BLOCK_S: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        s_idx = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        s_ok = s_idx < seq
        p_idx = tl.arange(0, BLOCK_P)
        pair_ok = p_idx < PAIRS
        # float64 constants come through memory: a float argument or literal is float32
        factor = tl.load(consts_ptr)
        sign = tl.load(consts_ptr + 1)
        if ANGLES:  # the angles of these positions, once for every head: float64 mod 2π
            two_pi = tl.load(consts_ptr + 2)
            pos = tl.load(pos_ptr + b * stride_pb + s_idx * stride_ps, mask=s_ok, other=0)
            freq = tl.load(freq_ptr + p_idx, mask=pair_ok, other=0.0)
            angle = pos.to(tl.float64)[:, None] * freq[None, :]
            angle = angle - tl.floor(angle / two_pi) * two_pi
            cos = (tl.cos(angle) * factor).to(tl.float32)
            sin = (tl.sin(angle) * factor * sign).to(tl.float32)
        else:  # a rotary encoding's float32 tables, [batch or 1, seq, n]
            m = s_ok[:, None] & pair_ok[None, :]
            at = b * stride_tb + s_idx[:, None] * stride_ts + p_idx[None, :] * stride_tp
            cos = tl.load(cos_ptr + at, mask=m, other=0.0).to(tl.float32)
            sin = tl.load(sin_ptr + at, mask=m, other=0.0).to(tl.float32) * sign.to(tl.float32)
        if HALF:
            d1 = OFFSET + p_idx
            d2 = OFFSET + p_idx + PAIRS
        else:
            d1 = OFFSET + 2 * p_idx
            d2 = OFFSET + 2 * p_idx + 1
        r_idx = tl.arange(0, BLOCK_R)  # the channels outside the rotary ones
        rest = tl.where(r_idx < OFFSET, r_idx, r_idx + 2 * PAIRS)
        rest_ok = rest < HEAD_DIM
        if SLOTS:  # the rows the keys and values go to: only those inside the cache
            dst_idx = tl.load(slot_ptr + s_idx, mask=s_ok, other=0)
            dst_ok = s_ok & (dst_idx >= 0) & (dst_idx < cache_len)
        else:
            dst_idx = s_idx
            dst_ok = s_ok
        _rotate_heads(
            q_ptr, q_out_ptr, q_heads, b, s_idx, s_idx, s_ok, s_ok, d1, d2, pair_ok, cos, sin,
            rest, rest_ok, stride_qb, stride_qh, stride_qs, stride_qd, stride_qob, stride_qoh,
            stride_qos, stride_qod, COPY,
        )  # fmt: skip
        _rotate_heads(
            k_ptr, k_out_ptr, k_heads, b, s_idx, dst_idx, s_ok, dst_ok, d1, d2, pair_ok, cos,
            sin, rest, rest_ok, stride_kb, stride_kh, stride_ks, stride_kd, stride_kob, stride_koh,
            stride_kos, stride_kod, COPY,
        )  # fmt: skip
        cols = tl.arange(0, BLOCK_D)  # the values, copied into the cache whole
        mv = s_ok[:, None] & (cols < HEAD_DIM)[None, :]
        mvd = dst_ok[:, None] & (cols < HEAD_DIM)[None, :]
        for h in range(0, v_heads):
            src = v_ptr + b * stride_vb + h * stride_vh + s_idx[:, None] * stride_vs
            dst = v_out_ptr + b * stride_vob + h * stride_voh + dst_idx[:, None] * stride_vos
            val = tl.load(src + cols[None, :] * stride_vd, mask=mv, other=0.0)
            tl.store(dst + cols[None, :] * stride_vod, val.to(v_out_ptr.dtype.element_ty), mask=mvd)


def _strides(t: torch.Tensor | None, n: int) -> tuple[int, ...]:
    """``t``'s strides, or ``n`` zeros for a tensor that is not there."""
    return (0,) * n if t is None else tuple(t.stride())


def launch(
    q: torch.Tensor,
    k: torch.Tensor | None,
    source: tuple[torch.Tensor, ...],
    layout: str,
    sign: float,
    *,
    factor: float = 1.0,
    offset: int = 0,
    inplace: bool = False,
    cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate ``q`` and ``k`` (``[batch, heads, seq, head_dim]``, heads may differ; ``k``
    may be None) in one launch by ``source``: ``(positions, inv_freq)`` (angles in the
    kernel; positions ``[seq]`` or ``[batch, seq]``) or ``(cos, sin)`` (``[batch or 1,
    seq, n]``). With ``cache = (v, k_cache, v_cache, slots)`` the rotated keys and ``v``
    go to the caches' rows ``slots`` instead, a slot outside ``[0, max_seq_len)`` written
    nowhere. Returns the rotated ``(q, k)`` (the inputs themselves when ``inplace``;
    ``k_cache`` with a cache)."""
    batch, _, seq, head_dim = q.shape
    angles = source[0].dim() <= 2 and not source[0].is_floating_point()
    pairs = source[1].shape[-1]
    q_out = q if inplace else torch.empty_like(q)
    k_out = k if inplace or k is None else torch.empty_like(k)
    v, v_out, slots = None, None, None
    if cache is not None:
        v, k_out, v_out, slots = cache
    pos: torch.Tensor | None
    freq: torch.Tensor | None
    tables: tuple[torch.Tensor | None, ...]
    if angles:
        pos, freq = source
        pos_strides = (0, pos.stride(0)) if pos.dim() == 1 else tuple(pos.stride())
        tables = (None, None)
        table_strides: tuple[int, ...] = (0, 0, 0)
    else:
        pos = freq = None
        pos_strides = (0, 0)
        tables = source
        cos = source[0]
        table_strides = (0 if cos.shape[0] == 1 else cos.stride(0), cos.stride(1), cos.stride(2))
    if batch == 0 or seq == 0:  # nothing to turn: no launch (an empty grid)
        return q_out, k_out
    rest = head_dim - 2 * pairs
    cache_len = 0 if k_out is None else k_out.shape[2]  # the rows a slot may name
    grid = (batch, triton.cdiv(seq, BLOCK_S))
    # filled on the device (no copy from the host): the factor, the sign, 2π in float64
    consts = torch.stack(
        [
            torch.full((), x, dtype=torch.float64, device=q.device)
            for x in (factor, sign, 2 * math.pi)
        ]
    )
    k_in = q if k is None else k  # a pointer the kernel never reads: 0 heads of it
    _rope_kernel[grid](
        q, k_in, q if v is None else v, q_out, q_out if k_out is None else k_out,
        q_out if v_out is None else v_out, pos, freq, *tables, slots, consts,
        q.shape[1], 0 if k is None else k.shape[1], 0 if v is None else v.shape[1], seq,
        cache_len,
        *pos_strides, *table_strides, *q.stride(), *_strides(k, 4), *_strides(v, 4),
        *q_out.stride(), *_strides(k_out, 4), *_strides(v_out, 4),
        PAIRS=pairs,
        BLOCK_P=triton.next_power_of_2(pairs),
        HEAD_DIM=head_dim,
        BLOCK_R=triton.next_power_of_2(max(rest, 1)),
        BLOCK_D=triton.next_power_of_2(head_dim),
        OFFSET=offset,
        HALF=layout == "half",
        ANGLES=angles,
        SLOTS=slots is not None,
        COPY=rest > 0 and not inplace,
        BLOCK_S=BLOCK_S,
    )  # fmt: skip
    return q_out, k_out


class TritonRope(torch.autograd.Function):
    """The kernel with its backward: the gradients turned by the opposite angle (a
    rotation's transpose), through the same kernel. ``k`` may be None (one tensor)."""

    @staticmethod
    def forward(ctx: Any, q, k, source, layout, sign, factor, offset, inplace):
        ctx.save_for_backward(*source)
        ctx.args = layout, sign, factor, offset
        if inplace:
            ctx.mark_dirty(*(t for t in (q, k) if t is not None))
        return launch(q, k, source, layout, sign, factor=factor, offset=offset, inplace=inplace)

    @staticmethod
    def backward(ctx: Any, grad_q, grad_k):
        layout, sign, factor, offset = ctx.args
        source = tuple(ctx.saved_tensors)
        grad_k = None if grad_k is None else grad_k.contiguous()
        dq, dk = launch(
            grad_q.contiguous(), grad_k, source, layout, -sign, factor=factor, offset=offset
        )
        return dq, dk, None, None, None, None, None, None
