"""The CPU flash kernel a block of queries at a time, with a blockwise backward: what the
paths that train a bias on the CPU without ``[batch, heads, L, L]`` share.

:func:`flash_forward` calls ATen's fused CPU kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``, which takes a float mask through its
strides and returns the log-sum-exp of every row) once per block of queries, each with its
own rows of the bias; :func:`flash_backward` is FlashAttention-2's backward (Dao 2023,
arXiv:2307.08691, Algorithm 2) over blocks of queries, each block's probabilities recomputed
from the log-sum-exp, the score gradients handed to the caller, which keeps the bias's
gradient in whatever shape the bias has: a table (:mod:`~posenc.attn.runners.flash`),
distance values (:mod:`~posenc.attn.runners.distance`) or an encoding's parameters
(:mod:`~posenc.attn.runners.rows`).

This is the place a GPU kernel would plug in; the CPU path imports no Triton.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from ...functional.dtypes import math_dtype

__all__ = [
    "BLOCK",
    "FLASH_OP",
    "after_query",
    "bias_flash_available",
    "block_size",
    "check_blockwise",
    "flash_backward",
    "flash_forward",
]

#: queries per block of the backward: it holds ``[batch, heads, BLOCK, k_len]`` floats
BLOCK = 64
#: the CPU flash kernel: takes a float mask (with is_causal) and returns the log-sum-exp
FLASH_OP = "_scaled_dot_product_flash_attention_for_cpu"


#: queries per kernel call: an eighth of the length, within these bounds (fewer calls leave
#: more of each diagonal tile computed in vain, smaller ones give each call too little work;
#: t5, 8 heads of 64, 2 cores: 1.04x the floor at L 1024 with 128, 1.19x with 512; 1.08x at
#: L 4096 with 256, 1.21x with 128)
MIN_BLOCK, MAX_BLOCK = 64, 256


def block_size(n: int, parts: int = 8) -> int:
    """Queries per kernel call for ``n`` queries: ``n // parts`` within ``[MIN_BLOCK,
    MAX_BLOCK]``."""
    return min(MAX_BLOCK, max(MIN_BLOCK, n // parts))


def after_query(i0: int, i1: int, lo: int, hi: int, device: torch.device) -> torch.Tensor:
    """The causal mask of queries ``i0..i1-1`` over keys ``lo..hi-1``, by index: True where
    the key comes after its query (``j > i``).

    Shapes:
        -> ``[i1 - i0, hi - lo]`` bool
    """
    return torch.arange(lo, hi, device=device) > torch.arange(i0, i1, device=device)[:, None]


@functools.cache  # the kernels of this torch: asked once
def bias_flash_available() -> bool:
    """Whether this torch has the CPU flash kernel with a mask and the log-sum-exp
    (``aten._scaled_dot_product_flash_attention_for_cpu``; absent, the callers keep SDPA's
    math path)."""
    if not hasattr(torch.ops.aten, FLASH_OP):
        return False
    schema = getattr(torch.ops.aten, FLASH_OP).default._schema
    return any(a.name == "attn_mask" for a in schema.arguments)


def check_blockwise(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the inputs of a blockwise attention function (shapes, grouped heads, causal
    lengths, block) and return ``k, v`` with their heads repeated to those of ``q``
    (autograd sums the repeated heads' gradients back).

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]`` -> k, v ``[b, h, k_len, d]``
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be [batch, heads, len, d], got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    h, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    if h % k.shape[1]:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads ({k.shape[1]})")
    if causal and q_len != k_len:
        raise ValueError(
            f"causal=True needs q_len == k_len (got {q_len}, {k_len}): fold the mask into a bias"
        )
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be an int >= 1, got {block!r}")
    group = h // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return k, v


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Callable[[int, int, int], torch.Tensor],
    scale: float,
    *,
    block: int,
    keys: Callable[[int, int], int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU flash kernel a block of queries at a time, each over its first keys with
    its own float mask: the forward of the blockwise paths that never hold the whole bias
    (:mod:`~posenc.attn.runners.distance`, :mod:`~posenc.attn.runners.rows`).

    Args:
        mask: ``mask(i0, i1, n)``, the bias of queries ``i0..i1-1`` over keys ``0..n-1``
            (``[b | 1, h, i1 - i0, n]``, a strided view will do if its last stride is 1),
            ``-inf`` where a query may not see a key.
        block: queries per kernel call.
        keys: ``keys(i0, i1)``, how many keys the block sees (the first ones).

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, h, k_len, d]`` -> ``(out [b, h, q_len, d],
        lse [b, h, q_len])``, the log-sum-exp in float32 (float64 for float64 inputs).
    """
    b, h, q_len, _ = q.shape
    kernel = getattr(torch.ops.aten, FLASH_OP)
    if q_len <= block and q.is_contiguous():  # one kernel call: its output, not a copy
        n = keys(0, q_len)
        k_n, v_n = (t if n == t.shape[2] else t[:, :, :n] for t in (k, v))
        attn_mask = mask(0, q_len, n)
        out, lse = kernel(q, k_n, v_n, 0.0, False, attn_mask=attn_mask, scale=scale)[:2]
        return out.contiguous(), lse
    out = torch.empty_like(q)
    lse = torch.empty(b, h, q_len, dtype=math_dtype(q.dtype), device=q.device)
    for i0 in range(0, q_len, block):
        i1 = min(i0 + block, q_len)
        n = keys(i0, i1)
        qb = q[:, :, i0:i1]
        o, block_lse = kernel(
            qb, k[:, :, :n], v[:, :, :n], 0.0, False, attn_mask=mask(i0, i1, n), scale=scale
        )[:2]
        out[:, :, i0:i1], lse[:, :, i0:i1] = o, block_lse
    return out, lse


def flash_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | Callable[[int, int, int], torch.Tensor],
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    *,
    block: int,
    causal: bool = False,
    keys: Callable[[int, int], int] | None = None,
    bias_grad: Callable[[int, torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of ``softmax(q kᵀ · scale + bias) v`` from the output's and the
    log-sum-exp of every score row (FlashAttention-2's backward, Dao 2023, Algorithm 2):
    per block of queries, ``P = exp(S - lse)``, ``dV += Pᵀ dO``, ``dS = P ⊙ (dO Vᵀ - D)``
    with ``D = rowsum(dO ⊙ O)``, ``dQ = dS K · scale``, ``dK += dSᵀ Q · scale``, and
    ``dS`` handed to ``bias_grad`` (the bias's gradient, in whatever shape it keeps).

    Args:
        bias: the bias, or a function ``bias(i0, i1, n)`` that gives the rows of the
            queries ``i0..i1-1`` over the keys ``0..n-1`` (recomputed per block).
        block: queries per block.
        causal: mask keys after their query by index (``q_len == k_len``): each block then
            sees the keys up to its last query.
        keys: the keys the block of queries ``i0..i1-1`` sees (the first ones), for a bias
            that masks the rest with ``-inf`` itself; the blocks then run last to first
            (for the reversed queries of :mod:`~posenc.attn.runners.distance`, the order in
            which this count does not decrease). None: every key (or the causal ones).
        bias_grad: called as ``bias_grad(i0, dS)`` per block, ``dS`` ``[b·h, blk, keys]``
            (overwritten after the call); None: no gradient of the bias.

    Shapes:
        grad, q, out ``[b, h, q_len, d]``; k, v ``[b, h, k_len, d]``; bias
        ``[b | 1, h, q_len, k_len]`` (a view will do); lse ``[b, h, q_len]`` ->
        ``(dq, dk, dv)`` in float32 (float64 for float64 inputs).
    """
    dtype = math_dtype(q.dtype)
    b, h, q_len, d = q.shape
    k_len = k.shape[2]
    # [b·h, len, d] for the batched matrix products, accumulated in place
    q3, k3, v3 = (t.to(dtype).reshape(b * h, -1, d) for t in (q, k, v))
    grad3 = grad.to(dtype).reshape(b * h, q_len, d)
    # a row that sees no key has no log-sum-exp (-inf or 0 by kernel): its P is 0 anyway
    lse = torch.where(torch.isinf(lse), 0.0, lse).to(dtype).unsqueeze(-1)  # [b, h, q_len, 1]
    delta = (grad3.view(grad.shape) * out.to(dtype)).sum(-1, keepdim=True)
    delta = delta.view(b * h, q_len, 1)  # D = rowsum(dO ⊙ O)
    gq = torch.empty(b * h, q_len, d, dtype=dtype, device=q.device)
    gk = torch.zeros(b * h, k_len, d, dtype=dtype, device=q.device)
    gv = torch.zeros(b * h, k_len, d, dtype=dtype, device=q.device)
    underflow = math.log(torch.finfo(dtype).tiny)
    starts = range(0, q_len, block)
    for i0 in reversed(starts) if keys is not None else starts:
        i1 = min(i0 + block, q_len)
        n = keys(i0, i1) if keys is not None else (i1 if causal else k_len)
        qb, gb = q3[:, i0:i1], grad3[:, i0:i1]  # [b·h, blk, d]
        # S - lse = q kᵀ·scale + bias - lse, [b·h, blk, n]
        rows = bias(i0, i1, n) if callable(bias) else bias[:, :, i0:i1, :n]
        s = (rows - lse[:, :, i0:i1]).expand(b, h, -1, -1)
        s = torch.baddbmm(s.reshape(b * h, i1 - i0, n), qb, k3[:, :n].transpose(1, 2), alpha=scale)
        if causal:  # the diagonal block: keys after their query
            later = torch.ones(i1 - i0, i1 - i0, dtype=torch.bool, device=q.device).triu(1)
            s[:, :, i0:].masked_fill_(later, float("-inf"))
        # flush to zero what exp() would make subnormal (far keys under a steep ALiBi):
        # below 2^-126 of a row whose largest weight is 1, and 1.5x slower to multiply
        p = s.masked_fill_(s < underflow, float("-inf")).exp_()
        gv[:, :n].baddbmm_(p.transpose(1, 2), gb)  # in place, strided slice too
        dp = torch.bmm(gb, v3[:, :n].transpose(1, 2))
        ds = p.mul_(dp.sub_(delta[:, i0:i1]))  # dS, in P's memory
        if bias_grad is not None:
            bias_grad(i0, ds)
        gq[:, i0:i1] = torch.bmm(ds, k3[:, :n])
        gk[:, :n].baddbmm_(ds.transpose(1, 2), qb)
    gq, gk = gq.mul_(scale), gk.mul_(scale)  # dS·scale: the scores' scale
    return gq.view(q.shape), gk.view(k.shape), gv.view(v.shape)
