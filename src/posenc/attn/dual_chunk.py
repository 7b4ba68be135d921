"""Dual Chunk Attention (An et al. 2024, arXiv:2402.17463): one softmax over the keys of a
query's chunk, of the chunk before and of earlier chunks, each region's scores from the
query turned by that region's position (:mod:`posenc.functional.dca`).

The engines (vLLM, SGLang) run three flash-attention calls and merge them by their
log-sum-exp; here the three regions' scores are taken for a block of query rows at a time
and one explicit softmax runs over them (the same result, with the NaN and dead-row rules
of :func:`~posenc.attn.runners.math.explicit_attention`). Memory: a few ``[batch, heads,
rows, k_len]`` tensors at a time (:data:`~posenc.attn.runners.scores.BLOCK_SCORES`), and,
with padding or packed documents, the dense mask of the context; time: three score
products, the explicit softmax's.
"""

from __future__ import annotations

import torch

from ..functional.dca import dca_length_factor, dca_region
from ..functional.dtypes import math_dtype
from ..rotary.dca import DualChunkRoPE
from .masks import AttentionContext, zero_dead_rows
from .runners.math import probabilities, read_values
from .runners.scores import BLOCK_SCORES, mask_rows, row_blocks

__all__ = ["dual_chunk_attention"]


def dual_chunk_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: DualChunkRoPE,
    context: AttentionContext,
    scale: float,
    block: int | None = None,
) -> torch.Tensor:
    """Causal Dual Chunk Attention of unrotated ``q`` over unrotated ``k, v``.

    Args:
        q: ``[b, h, q_len, d]``; k, v ``[b, kv_h, k_len, d]``, not rotated: the keys turn by
            their place in their chunk here, the queries three ways.
        encoding: the ``dca`` encoding.
        context: the positions (``[len]`` or ``[b, len]``, which also cut the chunks) and
            the padding and segment masks.
        scale: the score scale; past ``original_max_position_embeddings`` it is multiplied
            by the square of :func:`~posenc.functional.dca.dca_length_factor` of ``k_len``.
        block: query rows per block; default: about ``BLOCK_SCORES`` scores a block.

    Shapes:
        -> ``[b, h, q_len, d]`` in the dtype of ``q``.
    """
    b, h, q_len, _ = q.shape
    k_len = k.shape[2]
    positions = context.positions
    # causal alone: each block's mask from the positions (no [q_len, k_len] mask is built)
    allowed = None if context.masks is None else context.allowed(causal=True)
    mask, dead = (None, None) if allowed is None else allowed
    scale = scale * dca_length_factor(k_len, encoding.config.original_max_position_embeddings) ** 2
    dtype = math_dtype(q.dtype)
    keys = encoding.rotate(k, encoding.rotation(positions.k), key=True)
    keys = keys.to(dtype).repeat_interleave(h // k.shape[1], 1)  # [b, h, k_len, d], once
    turns = encoding.query_rotations(positions.q)  # intra, succ, inter: (cos, sin) each
    if block is None:
        block = max(1, BLOCK_SCORES // (3 * b * h * k_len))
    train = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))

    def rows(i0: int, i1: int) -> torch.Tensor:
        q_pos = positions.q[..., i0:i1]
        region = dca_region(q_pos, positions.k, encoding.chunk_len)  # [(b,) rows, k_len]
        region = region.unsqueeze(-3) if region.dim() == 3 else region  # [(b, 1,) rows, k]
        parts = [
            encoding.rotate(q[:, :, i0:i1], tuple(t[..., i0:i1, :] for t in turn)).to(dtype)
            @ keys.transpose(-1, -2)  # [b, h, rows, k_len]
            for turn in turns
        ]
        scores = torch.where(region == 0, parts[0], torch.where(region == 1, parts[1], parts[2]))
        seen = mask_rows(mask, i0, i1)
        if mask is None:  # a row that sees no key gets zeros (probabilities' limit)
            seen = region_causal(q_pos, positions.k)
        probs = probabilities(scores * scale, allowed=seen)
        return read_values(probs, v).to(q.dtype)

    out = row_blocks(rows, q_len, block, train)
    return out if dead is None else zero_dead_rows(out, dead)


def region_causal(q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """The causal mask by positions, ``k <= q``. Shapes: ``[q]``/``[k]`` -> ``[q, k]``;
    ``[b, q]``/``[b, k]`` -> ``[b, 1, q, k]``."""
    seen = k_positions.unsqueeze(-2) <= q_positions.unsqueeze(-1)
    return seen.unsqueeze(-3) if seen.dim() == 3 else seen
