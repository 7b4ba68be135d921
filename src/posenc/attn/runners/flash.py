"""The ``flash`` runner: attention with a bias table that trains on the CPU without
``[batch, heads, L, L]``.

SDPA with a bias that needs gradients falls back to its math path on the CPU: it keeps the
``[batch, heads, q_len, k_len]`` probabilities of every layer and backpropagates through
them. :func:`bias_flash_attention` runs the forward on the fused CPU flash kernel (which
also returns the log-sum-exp of every row) and the blockwise backward of FlashAttention-2
(:func:`~posenc.attn.kernels.flash_blocks.flash_backward`), so the backward holds
``[batch, heads, block, k_len]`` at a time, and the gradient of the bias is summed over
the batch into a table of the bias's own shape (``[1, heads, q_len, k_len]`` for a bias
shared by the batch, :class:`TableGrad`), which autograd carries back to the encoding's
parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.function import once_differentiable

from ...functional.dtypes import math_dtype
from ..kernels.flash_blocks import (
    BLOCK,
    FLASH_OP,
    bias_flash_available,
    check_blockwise,
    flash_backward,
)
from ..masks import zero_dead_rows

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["TableGrad", "bias_flash_attention", "bias_flash_available", "flash"]


def bias_flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float,
    causal: bool,
    block: int = BLOCK,
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + bias) v`` on the CPU, with a blockwise backward.

    Args:
        q: ``[batch, heads, q_len, d]``, float64, float32, bfloat16 or float16.
        k, v: ``[batch, kv_heads, k_len, d]`` with ``heads`` a multiple of ``kv_heads``
            (grouped-query heads are repeated here; autograd sums their gradients back).
        bias: ``[heads, q_len, k_len]`` or ``[batch | 1, heads, q_len, k_len]``, ``-inf``
            where a query may not see a key (every query must see one key at least). It is
            used in float32 (float64 for float64 inputs), so it is not rounded to bf16.
        scale: the score scale (the bias is added after it).
        causal: also mask keys after their query, by index (``q_len == k_len``): the kernel
            and the backward then skip the blocks above the diagonal.
        block: queries per block of the backward.

    Returns:
        ``[batch, heads, q_len, d]`` in the dtype of ``q``. The backward is done in float32
        (float64 for float64 inputs).

    Example:
        >>> q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
        >>> bias = torch.zeros(2, 5, 5, requires_grad=True)
        >>> out = bias_flash_attention(q, k, v, bias, scale=0.5, causal=True)
        >>> out.sum().backward(); bias.grad.shape
        torch.Size([2, 5, 5])
    """
    k, v = check_blockwise(q, k, v, causal, block)
    b, h, q_len, _ = q.shape
    k_len = k.shape[2]
    if bias.dim() == 3:
        bias = bias.unsqueeze(0)
    if (
        bias.dim() != 4
        or (bias.shape[0] != 1 and bias.shape[0] != b)
        or bias.shape[1:] != (h, q_len, k_len)
    ):
        raise ValueError(
            f"bias must be [heads, q_len, k_len] or [batch | 1, heads, q_len, k_len] = "
            f"[{b} | 1, {h}, {q_len}, {k_len}], got {tuple(bias.shape)}"
        )
    # the kernel reads the last dimension as if contiguous (torch 2.13 gives wrong results
    # for a stride other than 1 there; SDPA copies such inputs too)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    bias = bias.to(math_dtype(q.dtype))
    if bias.stride(-1) != 1:
        bias = bias.contiguous()
    return _BiasFlash.apply(q, k, v, bias, float(scale), bool(causal), block)


class _BiasFlash(torch.autograd.Function):
    """The flash forward and the blockwise FlashAttention-2 backward (see the module)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
        scale: float,
        causal: bool,
        block: int,
    ) -> torch.Tensor:
        op = getattr(torch.ops.aten, FLASH_OP)
        out, lse = op(q, k, v, 0.0, causal, attn_mask=bias, scale=scale)  # lse [b, h, q_len]
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale, ctx.causal, ctx.block = scale, causal, block
        return out

    @staticmethod
    @once_differentiable  # a second derivative would need the backward's own graph
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, bias, out, lse = ctx.saved_tensors
        need = ctx.needs_input_grad
        sink = TableGrad(bias, q.shape[0]) if need[3] else None
        gq, gk, gv = flash_backward(
            grads[0],
            q,
            k,
            v,
            bias,
            out,
            lse,
            ctx.scale,
            block=ctx.block,
            causal=ctx.causal,
            bias_grad=sink,
        )
        return (
            gq.to(q.dtype) if need[0] else None,
            gk.to(k.dtype) if need[1] else None,
            gv.to(v.dtype) if need[2] else None,
            None if sink is None else sink.total,
            None,
            None,
            None,
        )


class TableGrad:
    """Collects the score gradients of each block of queries into the gradient of a bias
    table (summed over the batch where the table is shared by it).

    Shapes:
        ``ds`` ``[b·h, blk, keys]`` of the queries from ``i0`` -> :attr:`total`, the shape
        of ``bias`` (``[b | 1, h, q_len, k_len]``).
    """

    def __init__(self, bias: torch.Tensor, batch: int) -> None:
        self.total = torch.zeros(bias.shape, dtype=bias.dtype, device=bias.device)
        self.shared = bias.shape[0] == 1 and batch > 1

    def __call__(self, i0: int, ds: torch.Tensor) -> None:
        rows, keys = ds.shape[1:]
        ds4 = ds.view(-1, self.total.shape[1], rows, keys)  # [b, h, blk, keys]
        self.total[:, :, i0 : i0 + rows, :keys] += ds4.sum(0, keepdim=True) if self.shared else ds4


def flash(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`bias_flash_attention` on the materialised bias, the masks folded
    into it as ``-inf``, the causal mask by index (the kernel skips the blocks above the
    diagonal) where the positions order keys as their index does."""
    context, causal, pattern = call.context, call.causal, call.options.pattern
    bias = call.bias_table()
    by_index = causal and context.positions.index_ordered()
    dead = None
    if context.masks is not None or pattern.local or (causal and not by_index):
        masks = context.allowed(causal, pattern)
        assert masks is not None, "masks, a window or a causal mask: something is masked"
        allowed, dead = masks
        bias = bias.masked_fill(~allowed, float("-inf"))
    out = bias_flash_attention(call.q, call.k, call.v, bias, call.scale, by_index)
    return zero_dead_rows(out, dead)
