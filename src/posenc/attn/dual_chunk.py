"""Dual Chunk Attention (An et al. 2024, arXiv:2402.17463): one softmax over the keys of a
query's chunk, of the chunk before and of earlier chunks, each region's scores from the
query turned by that region's position (:mod:`posenc.functional.dca`).

The engines (vLLM, SGLang) run three flash-attention calls and merge them by their
log-sum-exp. Two exact paths here:

- by chunks (:func:`by_chunks`; the default positions, no padding or documents, finite
  inputs): for the queries of one chunk, the key regions are fixed ranges, so the three
  rotated queries are joined along the head (``[q_inter | q_succ | q_intra]``, 3·d wide)
  and each key is placed in its region's third (zeros elsewhere): one fused SDPA call per
  chunk gives every score from its own region's query, under one softmax (the values are
  padded to the same width, which the fused kernels need). Memory: the chunk's
  ``[kv_heads, keys, 3·d]`` keys and values; no ``[L, L]`` tensor.
- by rows (:func:`by_rows`, everything else): the three regions' scores for a block of
  query rows at a time and one explicit softmax over them, with the NaN and dead-row rules
  of :func:`~posenc.attn.runners.math.explicit_attention`. Memory: a few ``[batch, heads,
  rows, k_len]`` tensors at a time (:data:`~posenc.attn.runners.scores.BLOCK_SCORES`), and,
  with padding or packed documents, the dense mask of the context.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..functional.dca import dca_length_factor, dca_region
from ..functional.dtypes import math_dtype
from ..positions import causal_mask
from ..rotary.dca import DualChunkRoPE
from .checks import finite
from .masks import AttentionContext, zero_dead_rows
from .runners.math import probabilities, read_values
from .runners.scores import BLOCK_SCORES, mask_rows, row_blocks

__all__ = ["by_chunks", "by_rows", "dual_chunk_attention"]


def dual_chunk_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: DualChunkRoPE,
    context: AttentionContext,
    scale: float,
    block: int | None = None,
    explicit: bool = False,
) -> torch.Tensor:
    """Causal Dual Chunk Attention of unrotated ``q`` over unrotated ``k, v``.

    Args:
        q: ``[b, h, q_len, d]``; k ``[b, kv_h, k_len, d]``, not rotated (``d`` the
            encoding's ``head_dim``): the keys turn by their place in their chunk here, the
            queries three ways. v ``[b, kv_h, k_len, d_v]``.
        encoding: the ``dca`` encoding.
        context: the positions (``[len]`` or ``[b, len]``, which also cut the chunks) and
            the padding and segment masks.
        scale: the score scale; past ``original_max_position_embeddings`` it is multiplied
            by the square of :func:`~posenc.functional.dca.dca_length_factor` of ``k_len``.
        block: query rows per block; default: about ``BLOCK_SCORES`` scores a block.
        explicit: always the explicit softmax by rows (``backend="math"``).

    Shapes:
        -> ``[b, h, q_len, d_v]`` in the dtype of ``q``.

    Raises:
        ValueError: q or k not ``head_dim`` wide (a dca of another head size), named.
    """
    for name, t in (("q", q), ("k", k)):  # each channel must turn: none may pass through
        encoding._check_heads(name, t)
    k_len = k.shape[2]
    scale = scale * dca_length_factor(k_len, encoding.config.original_max_position_embeddings) ** 2
    plain = not context.positions.explicit and context.masks is None
    if plain and not explicit and finite(q, k, v):
        return by_chunks(q, k, v, encoding, scale)
    return by_rows(q, k, v, encoding, context, scale, block)


def by_chunks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, encoding: DualChunkRoPE, scale: float
) -> torch.Tensor:
    """Dual Chunk Attention at the default positions (the queries the last ``q_len`` of
    ``arange(k_len)``), one SDPA call per chunk of queries (see the module).

    Shapes:
        q ``[b, h, q_len, d]``, k ``[b, kv_h, k_len, d]``, v ``[b, kv_h, k_len, d_v]`` ->
        ``[b, h, q_len, d_v]``.
    """
    q_len, k_len, d, d_v = q.shape[2], k.shape[2], q.shape[-1], v.shape[-1]
    start, s = k_len - q_len, encoding.chunk_len
    keys = encoding.rotate(k, encoding.rotation(torch.arange(k_len, device=k.device)), key=True)
    turns = encoding.query_rotations(torch.arange(start, k_len, device=q.device))
    inter, succ, intra = (encoding.rotate(q, turn) for turn in turns[::-1])
    # the values as wide as the joined heads (zeros after them): fused kernels (CPU flash
    # attention) take q, k and v of one width, else SDPA falls back to its [L, L] math
    values = F.pad(v, (0, max(3 * d - d_v, 0)))
    outs = []
    for c0 in range(start - start % s, k_len, s):  # each chunk that holds queries
        r0, r1 = max(c0, start) - start, min(c0 + s, k_len) - start  # its query rows
        end, a = start + r1, max(c0 - s, 0)  # its keys: inter [0, a), succ [a, c0), intra
        joined = torch.cat([t[:, :, r0:r1] for t in (inter, succ, intra)], dim=-1)
        placed = keys.new_zeros(*k.shape[:2], end, 3 * d)
        placed[:, :, :a, :d] = keys[:, :, :a]
        placed[:, :, a:c0, d : 2 * d] = keys[:, :, a:c0]
        placed[:, :, c0:end, 2 * d :] = keys[:, :, c0:end]
        rows = torch.arange(start + r0, end, device=q.device)
        seen = torch.arange(end, device=q.device) <= rows.unsqueeze(-1)  # [rows, end]
        outs.append(
            F.scaled_dot_product_attention(
                joined,
                placed,
                values[:, :, :end],
                attn_mask=seen,
                scale=scale,
                enable_gqa=q.shape[1] != k.shape[1],
            )
        )
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out[..., :d_v].to(q.dtype)


def by_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: DualChunkRoPE,
    context: AttentionContext,
    scale: float,
    block: int | None = None,
) -> torch.Tensor:
    """Dual Chunk Attention at any positions, with any masks: the regions' scores by blocks
    of query rows, one explicit softmax (see the module). ``scale`` is the whole score
    scale (the length factor in it).

    Shapes:
        q ``[b, h, q_len, d]``, k ``[b, kv_h, k_len, d]``, v ``[b, kv_h, k_len, d_v]`` ->
        ``[b, h, q_len, d_v]``.
    """
    b, h, q_len, _ = q.shape
    k_len = k.shape[2]
    positions = context.positions
    # causal alone: each block's mask from the positions (no [q_len, k_len] mask is built)
    allowed = None if context.masks is None else context.allowed(causal=True)
    mask, dead = (None, None) if allowed is None else allowed
    dtype = math_dtype(q.dtype)
    keys = encoding.rotate(k, encoding.rotation(positions.k), key=True)
    keys = keys.to(dtype).repeat_interleave(h // k.shape[1], 1)  # [b, h, k_len, d], once
    turned = [encoding.rotate(q, turn) for turn in encoding.query_rotations(positions.q)]
    if block is None:
        block = max(1, BLOCK_SCORES // (3 * b * h * k_len))
    train = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))

    def rows(i0: int, i1: int) -> torch.Tensor:
        q_pos = positions.q[..., i0:i1]
        region = dca_region(q_pos, positions.k, encoding.chunk_len)  # [(b,) rows, k_len]
        region = region.unsqueeze(-3) if region.dim() == 3 else region  # [(b, 1,) rows, k]
        parts = [t[:, :, i0:i1].to(dtype) @ keys.transpose(-1, -2) for t in turned]
        scores = torch.where(region == 0, parts[0], torch.where(region == 1, parts[1], parts[2]))
        seen = mask_rows(mask, i0, i1)
        if mask is None:  # a row that sees no key gets zeros (probabilities' limit)
            seen = causal_mask(q_pos, positions.k)
        probs = probabilities(scores * scale, allowed=seen)
        return read_values(probs, v).to(q.dtype)

    out = row_blocks(rows, q_len, block, train)
    return out if dead is None else zero_dead_rows(out, dead)
