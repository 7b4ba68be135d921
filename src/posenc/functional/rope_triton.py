"""RoPE as one Triton kernel: q and k of every head rotated in one launch, the angles of a
block of positions computed once for all heads (Su et al. 2021, arXiv:2104.09864).

The angles are :func:`~posenc.functional.rope.rope_cos_sin`'s: ``position · inv_freq`` in
float64, reduced modulo 2π, their cos and sin in float64 times the attention factor and
rounded once to float32, so no table is rounded to bfloat16 and the phase holds at long
positions (a float32 product loses it: transformers#29496). Each pair then turns in
float32 and is rounded once to the input's dtype, as :func:`~posenc.functional.rope.
apply_rope` does. Pairs are the first ``rotary_dim`` channels of a head (``half``: ``(i,
i + r/2)``; ``interleaved``: ``(2i, 2i + 1)``), the rest are copied through; positions are
``[seq]`` for the batch or ``[batch, seq]`` (packing, left padding, cache offsets). The
backward is the rotation by the opposite angle (:class:`TritonRope`), the kernel with its
sign flipped.

The kernel needs Triton; on a machine without a GPU it runs under Triton's interpreter
(``TRITON_INTERPRET=1``, set before Triton is imported), which is how the tests check it.
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

__all__ = ["TritonRope", "rope_triton", "triton_available"]

#: positions per program: each program turns these positions of every head of q and k
BLOCK_S = 16


def triton_available() -> bool:
    """Whether Triton imports (a GPU, or its interpreter, then runs the kernel)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _rotate_heads(
        x_ptr,
        out_ptr,
        heads,
        b,
        s_idx,
        s_ok,
        d1,
        d2,
        pair_ok,
        cos,
        sin,
        rest,
        rest_ok,
        stride_xb,
        stride_xh,
        stride_xs,
        stride_xd,
        stride_ob,
        stride_oh,
        stride_os,
        stride_od,
        COPY: tl.constexpr,
    ):
        """Turn the pairs ``(d1, d2)`` of positions ``s_idx`` of every head of one tensor
        and copy its channels ``rest`` through (unless the output is the input)."""
        m = s_ok[:, None] & pair_ok[None, :]
        for h in range(0, heads):
            src = x_ptr + b * stride_xb + h * stride_xh + s_idx[:, None] * stride_xs
            dst = out_ptr + b * stride_ob + h * stride_oh + s_idx[:, None] * stride_os
            x1 = tl.load(src + d1[None, :] * stride_xd, mask=m, other=0.0)
            x2 = tl.load(src + d2[None, :] * stride_xd, mask=m, other=0.0)
            a = x1.to(tl.float32)
            c = x2.to(tl.float32)
            o1 = a * cos - c * sin
            o2 = c * cos + a * sin
            tl.store(dst + d1[None, :] * stride_od, o1.to(x1.dtype), mask=m)
            tl.store(dst + d2[None, :] * stride_od, o2.to(x1.dtype), mask=m)
            if COPY:
                mr = s_ok[:, None] & rest_ok[None, :]
                kept = tl.load(src + rest[None, :] * stride_xd, mask=mr, other=0.0)
                tl.store(dst + rest[None, :] * stride_od, kept, mask=mr)

    @triton.jit
    def _rope_kernel(
        q_ptr,
        k_ptr,
        q_out_ptr,
        k_out_ptr,
        pos_ptr,
        freq_ptr,
        q_heads,
        k_heads,
        seq,
        stride_pb,
        stride_ps,
        stride_qb,
        stride_qh,
        stride_qs,
        stride_qd,
        stride_kb,
        stride_kh,
        stride_ks,
        stride_kd,
        stride_qob,
        stride_qoh,
        stride_qos,
        stride_qod,
        stride_kob,
        stride_koh,
        stride_kos,
        stride_kod,
        consts_ptr,
        PAIRS: tl.constexpr,
        BLOCK_P: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK_R: tl.constexpr,
        HALF: tl.constexpr,
        COPY: tl.constexpr,
        BLOCK_S: tl.constexpr,
    ):
        b = tl.program_id(0)
        s_idx = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        s_ok = s_idx < seq
        p_idx = tl.arange(0, BLOCK_P)
        pair_ok = p_idx < PAIRS
        # the angles of these positions, once for every head: float64, reduced mod 2π
        # float64 constants come through memory: a float argument or literal is float32
        factor = tl.load(consts_ptr)
        sign = tl.load(consts_ptr + 1)
        two_pi = tl.load(consts_ptr + 2)
        pos = tl.load(pos_ptr + b * stride_pb + s_idx * stride_ps, mask=s_ok, other=0)
        freq = tl.load(freq_ptr + p_idx, mask=pair_ok, other=0.0)
        angle = pos.to(tl.float64)[:, None] * freq[None, :]
        angle = angle - tl.floor(angle / two_pi) * two_pi
        cos = (tl.cos(angle) * factor).to(tl.float32)
        sin = (tl.sin(angle) * factor * sign).to(tl.float32)
        if HALF:
            d1 = p_idx
            d2 = p_idx + PAIRS
        else:
            d1 = 2 * p_idx
            d2 = 2 * p_idx + 1
        rest = 2 * PAIRS + tl.arange(0, BLOCK_R)
        rest_ok = rest < HEAD_DIM
        _rotate_heads(
            q_ptr, q_out_ptr, q_heads, b, s_idx, s_ok, d1, d2, pair_ok, cos, sin, rest,
            rest_ok, stride_qb, stride_qh, stride_qs, stride_qd, stride_qob, stride_qoh,
            stride_qos, stride_qod, COPY,
        )  # fmt: skip
        _rotate_heads(
            k_ptr, k_out_ptr, k_heads, b, s_idx, s_ok, d1, d2, pair_ok, cos, sin, rest,
            rest_ok, stride_kb, stride_kh, stride_ks, stride_kd, stride_kob, stride_koh,
            stride_kos, stride_kod, COPY,
        )  # fmt: skip


def _launch(q, k, positions, inv_freq, factor, layout, sign, inplace):
    """Rotate ``q`` and ``k`` (``[batch, heads, seq, head_dim]``, heads may differ) in one
    launch; returns the rotated pair (``q`` and ``k`` themselves when ``inplace``)."""
    batch, _, seq, head_dim = q.shape
    pairs = inv_freq.shape[0]
    q_out = q if inplace else torch.empty_like(q)
    k_out = k if inplace else torch.empty_like(k)
    if positions.dim() == 1:  # one row of positions for the batch: a stride of 0
        pos_strides = (0, positions.stride(0))
    else:
        pos_strides = (positions.stride(0), positions.stride(1))
    rest = head_dim - 2 * pairs
    grid = (batch, triton.cdiv(seq, BLOCK_S))
    # filled on the device (no copy from the host): the factor, the sign, 2π in float64
    consts = torch.stack(
        [
            torch.full((), v, dtype=torch.float64, device=q.device)
            for v in (factor, sign, 2 * math.pi)
        ]
    )
    _rope_kernel[grid](
        q, k, q_out, k_out, positions, inv_freq, q.shape[1], k.shape[1], seq,
        *pos_strides, *q.stride(), *k.stride(), *q_out.stride(), *k_out.stride(), consts,
        PAIRS=pairs,
        BLOCK_P=triton.next_power_of_2(pairs),
        HEAD_DIM=head_dim,
        BLOCK_R=triton.next_power_of_2(max(rest, 1)),
        HALF=layout == "half",
        COPY=rest > 0 and not inplace,
        BLOCK_S=BLOCK_S,
    )  # fmt: skip
    return q_out, k_out


class TritonRope(torch.autograd.Function):
    """:func:`rope_triton` with its backward: the gradients turned by the opposite angle
    (a rotation's transpose), through the same kernel."""

    @staticmethod
    def forward(ctx: Any, q, k, positions, inv_freq, factor, layout, inplace):
        ctx.save_for_backward(positions, inv_freq)
        ctx.factor, ctx.layout = factor, layout
        if inplace:
            ctx.mark_dirty(q, k)
        return _launch(q, k, positions, inv_freq, factor, layout, 1.0, inplace)

    @staticmethod
    def backward(ctx: Any, grad_q, grad_k):
        positions, inv_freq = ctx.saved_tensors
        grad_q, grad_k = grad_q.contiguous(), grad_k.contiguous()
        dq, dk = _launch(grad_q, grad_k, positions, inv_freq, ctx.factor, ctx.layout, -1.0, False)
        return dq, dk, None, None, None, None, None


def rope_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    attention_factor: float = 1.0,
    layout: str = "half",
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated by RoPE in one Triton launch, differentiable.

    Args:
        q: ``[batch, heads, seq, head_dim]``; k: ``[batch, kv_heads, seq, head_dim]`` (any
            strides; the same ``seq`` and ``head_dim``).
        positions: ``[seq]`` or ``[batch, seq]``, integers.
        inv_freq: ``[rotary_dim // 2]`` frequencies (a scaling's, float64 or float32);
            channels past ``rotary_dim`` are copied through.
        attention_factor: multiplies cos and sin (YaRN's, LongRoPE's).
        layout: ``"half"`` or ``"interleaved"``.
        inplace: write the result into ``q`` and ``k``.

    Returns:
        ``(q, k)`` rotated, in their dtypes.
    """
    if triton is None:
        raise RuntimeError("rope_triton needs Triton (pip install triton)")
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    if q.dim() != 4 or k.dim() != 4 or q.shape[2:] != k.shape[2:] or q.shape[0] != k.shape[0]:
        raise ValueError(
            "q and k must be [batch, heads, seq, head_dim] with the same batch, seq and "
            f"head_dim, got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if 2 * inv_freq.shape[-1] > q.shape[-1] or inv_freq.dim() != 1:
        raise ValueError(
            f"inv_freq must be [rotary_dim // 2] with rotary_dim <= head_dim ({q.shape[-1]}), "
            f"got {tuple(inv_freq.shape)}"
        )
    rows_ok = positions.dim() == 1 or (
        positions.dim() == 2 and positions.shape[0] in (1, q.shape[0])
    )
    if positions.is_floating_point() or positions.shape[-1] != q.shape[2] or not rows_ok:
        raise ValueError(
            f"positions must be integer [seq] or [batch, seq] with seq = {q.shape[2]} and "
            f"batch = {q.shape[0]} (or 1), got {positions.dtype} {tuple(positions.shape)}"
        )
    if not math.isfinite(attention_factor):
        raise ValueError(f"attention_factor must be finite, got {attention_factor}")
    freq = inv_freq.to(device=q.device, dtype=torch.float64).contiguous()
    if positions.dim() == 2 and positions.shape[0] == 1:
        positions = positions[0]
    positions = positions.to(q.device)
    out = TritonRope.apply(q, k, positions, freq, float(attention_factor), layout, inplace)
    return out[0], out[1]
