"""Inference with a shift-invariant bias on the CPU: the flash kernel, a block of queries at
a time, the bias rows sliced from ``2L - 1`` values.

A bias that depends on ``k_pos - q_pos`` only (T5's buckets, Raffel et al. 2020,
arXiv:1910.10683; KERPLE, Chi et al. 2022, arXiv:2205.09921; ALiBi) takes one value per
distance: over positions ``0..L-1`` its ``[heads, L, L]`` table is a Toeplitz matrix of the
``2L - 1`` values ``f(L - 1), ..., f(-(L - 1))``. :func:`shift_table` builds the table from
them (one evaluation per distance instead of per score, and a backward that sums each
diagonal, for the table a model shares across its layers), and
:func:`blockwise_bias_attention` runs SDPA's fused CPU kernel over blocks of ``BLOCK``
queries, each with its ``[heads, BLOCK, keys]`` rows copied out of a sliding view of those
values: the kernel's speed without the ``[heads, L, L]`` tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..base import BiasEncoding
from ..functional.dtypes import math_dtype
from ..positions import arange
from .bias_grad import FLASH_OP, bias_flash_available

__all__ = ["BLOCK", "BLOCK_FLOATS", "blockwise_bias_attention", "distance_rows", "shift_table"]

#: the most bias floats one call holds (32 MiB): every query in one call up to L = 1024
#: with 8 heads (the kernel's own causal mask then skips the tiles above the diagonal)
BLOCK_FLOATS = 1 << 23
#: queries per call beyond that: with the causal mask in the bias the kernel computes
#: every tile, and larger blocks ran slower (t5, L = 4096, 8 heads, 2 cores: 2.0x the
#: floor at 128 and 256 queries, 2.9x at 512, 4.3x at 1024; one call 1.9x)
BLOCK = 256


def distance_rows(
    encoding: BiasEncoding, n: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """The ``2n - 1`` values of a shift-invariant bias as a sliding view.

    Row ``a`` of the result is the bias of query ``n - 1 - a`` over keys ``0..n-1``: the
    bias of query ``n - 1`` over keys ``0..2n-2`` (``f(n - 1 - j)``), unfolded by one.

    Shapes:
        -> ``[heads, n, n]`` (a view of ``[heads, 2n - 1]``; rows in reverse query order)
    """
    values = encoding.bias(arange(1, device=device, offset=n - 1), arange(2 * n - 1, device=device))
    return values[:, 0].unfold(-1, n, 1)


def shift_table(
    encoding: BiasEncoding, n: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """``encoding.bias(arange(n), arange(n))`` of a shift-invariant encoding, from its
    ``2n - 1`` values (differentiable: the gradient of each value is its diagonal's sum).

    Shapes:
        -> ``[heads, n, n]``

    Example:
        >>> import posenc
        >>> t5 = posenc.create("t5", n_heads=2)
        >>> positions = torch.arange(5)
        >>> torch.equal(shift_table(t5, 5), t5.bias(positions, positions))
        True
    """
    return distance_rows(encoding, n, device).flip(-2)


def blockwise_bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding,
    scale: float,
    causal: bool,
    block: int | None = None,
) -> torch.Tensor:
    """Attention with a shift-invariant bias over positions ``0..L-1``, by blocks of queries.

    Each block calls SDPA (its fused CPU kernel, which takes a float bias) with its own bias
    rows and, under ``causal``, only the keys up to the block's last query (the diagonal
    block masked by ``-inf``). For inference: nothing here is kept for a backward.

    Args:
        q: ``[batch, heads, L, d]``; k, v: ``[batch, kv_heads, L, d]`` (grouped-query heads
            allowed).
        encoding: a bias encoding with ``shift_invariant`` (checked by the caller).
        scale: the score scale; causal: mask keys after their query.
        block: queries per call; default: all where the bias fits ``BLOCK_FLOATS``, else
            ``BLOCK`` (fewer where those rows would not fit).

    Returns:
        ``[batch, heads, L, d]`` in the dtype of ``q``.
    """
    n = q.shape[2]
    if block is None:
        floats = q.shape[1] * n * n
        block = n if floats <= BLOCK_FLOATS else max(16, min(BLOCK, BLOCK_FLOATS // (floats // n)))
    # the CPU kernel takes a float32 bias with bf16/fp16 inputs: the bias is not rounded
    rows = distance_rows(encoding, n, q.device).to(math_dtype(q.dtype))
    gqa = q.shape[1] != k.shape[1]
    if block >= n and causal and bias_flash_available():
        # one block: the kernel's own causal mask skips the tiles above the diagonal
        # (SDPA refuses a mask with is_causal, the kernel itself does not)
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        if gqa:
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        kernel = getattr(torch.ops.aten, FLASH_OP)
        return kernel(q, k, v, 0.0, True, attn_mask=rows.flip(-2).unsqueeze(0), scale=scale)[0]
    out = torch.empty_like(q)
    for i0 in range(0, n, block):
        i1 = min(i0 + block, n)
        keys = i1 if causal else n
        bias = rows[:, n - i1 : n - i0, :keys].flip(-2)  # [h, blk, keys], queries i0..i1-1
        if causal:  # the diagonal block: keys after their query
            later = torch.ones(i1 - i0, i1 - i0, dtype=torch.bool, device=q.device).triu(1)
            bias[:, :, i0:].masked_fill_(later, float("-inf"))
        out[:, :, i0:i1] = F.scaled_dot_product_attention(
            q[:, :, i0:i1],
            k[:, :, :keys],
            v[:, :, :keys],
            attn_mask=bias.unsqueeze(0),
            scale=scale,
            enable_gqa=gqa,
        )
    return out
