"""The ``scores`` runner: attention with a bias computed from each row's scores before the
softmax (CoPE's contextual positions, Golovneva et al. 2024, arXiv:2405.18719), by blocks
of query rows.

A row's bias needs the row's every score (CoPE gates them and counts the gates), so no
fused kernel can take it. The scores, the bias and the softmax of a block of ``B`` query
rows are computed explicitly (:func:`~posenc.attn.runners.math.explicit_attention`, which
keeps its semantics: masks, softcap, sinks, non-finite values), a block at a time; when a
backward will run, each block runs under activation checkpointing, so the backward
recomputes its block and nothing of ``[batch, heads, L, L]`` is kept between the forward and
the backward. Memory: a few ``[batch, heads, B, k_len]`` tensors at a time, with ``B`` chosen
so that one holds about :data:`BLOCK_SCORES` scores; time: the explicit softmax's, with the
block's scores computed twice when training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
from torch.utils.checkpoint import checkpoint

from ...base import BiasEncoding, ScoreBias
from ...functional.dtypes import math_dtype
from ..call import ScoreOptions
from ..masks import zero_dead_rows
from .math import explicit_attention

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = [
    "BLOCK_SCORES",
    "contextual_attention",
    "mask_rows",
    "needs_backward",
    "row_blocks",
    "rows_per_block",
    "scores",
]

#: the scores of one block of query rows (batch · heads · rows · keys): 4 Mi, 16 MiB in
#: float32 per tensor of the block
BLOCK_SCORES = 1 << 22


def contextual_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding,
    allowed: tuple[torch.Tensor, torch.Tensor] | None,
    scale: float,
    options: ScoreOptions,
    block: int | None = None,
) -> torch.Tensor:
    """``softmax(q kᵀ·scale + bias) v`` with the bias ``encoding.score_bias(q, scores,
    allowed)`` of each row's scaled scores, a block of query rows at a time.

    Args:
        q: ``[b, h, q_len, d]``; k, v ``[b, kv_h, k_len, d]``.
        encoding: a :class:`~posenc.base.ScoreBias` (CoPE).
        allowed: ``(mask, dead)`` from :meth:`AttentionContext.allowed
            <posenc.attn.masks.AttentionContext.allowed>` (mask ``[b | 1, 1, q_len,
            k_len]``, True where a query may see a key), or None for no mask.
        scale: the score scale.
        options: the softcap and sinks (the window or chunk is in ``allowed``).
        block: query rows per block; default: about :data:`BLOCK_SCORES` scores a block.

    Shapes:
        -> ``[b, h, q_len, d]`` in the dtype of ``q``.
    """
    h, q_len = q.shape[1], q.shape[2]
    k_len = k.shape[2]
    mask, dead = (None, None) if allowed is None else allowed
    block = rows_per_block(q, k_len) if block is None else block
    train = needs_backward(q, k, v, *encoding.parameters())

    dtype = math_dtype(q.dtype)
    keys = k.to(dtype).repeat_interleave(h // k.shape[1], 1)  # [b, h, k_len, d], once

    def rows(i0: int, i1: int) -> torch.Tensor:
        q_rows = q[:, :, i0:i1]
        seen = mask_rows(mask, i0, i1)
        scores = q_rows.to(dtype) @ keys.transpose(-1, -2)  # [b, h, rows, k_len]
        bias = cast(ScoreBias, encoding).score_bias(q_rows, scores * scale, seen)
        return explicit_attention(
            q_rows,
            k,
            v,
            scale,
            bias=bias,
            allowed=seen,
            softcap=options.softcap,
            sinks=options.sinks,
        )

    return zero_dead_rows(row_blocks(rows, q_len, block, train), dead)


def rows_per_block(q: torch.Tensor, k_len: int, multiple: int = 1) -> int:
    """Query rows per block of ``q``'s calls over ``k_len`` keys: about
    :data:`BLOCK_SCORES` scores (batch · heads · rows · keys) a block, a multiple of
    ``multiple``.

    Shapes:
        q ``[b, h, q_len, d]``
    """
    b, h = q.shape[:2]
    return max(1, BLOCK_SCORES // (b * h * k_len) // multiple) * multiple


def needs_backward(*tensors: torch.Tensor | None) -> bool:
    """Whether a backward will run through a block: grad mode is on and one of ``tensors``
    requires grad (then :func:`row_blocks` checkpoints each block)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def mask_rows(mask: torch.Tensor | None, i0: int, i1: int) -> torch.Tensor | None:
    """The rows ``i0:i1`` of a dense mask (``[..., q_len | 1, k_len]``; one row broadcast
    over every query stays whole), or None."""
    if mask is None or mask.shape[-2] == 1:
        return mask
    return mask[..., i0:i1, :]


def row_blocks(
    rows: Callable[[int, int], torch.Tensor], q_len: int, block: int, train: bool
) -> torch.Tensor:
    """``rows(i0, i1)``, the output of query rows ``i0:i1``, for each block of ``block``
    rows, joined along the rows. When ``train``, each block runs under activation
    checkpointing: the backward recomputes it, and no block's scores are kept.

    Shapes:
        ``rows(i0, i1)`` ``[b, h, i1 - i0, d]`` -> ``[b, h, q_len, d]``.
    """
    outs = []
    for i0 in range(0, q_len, block):
        i1 = min(i0 + block, q_len)
        outs.append(checkpoint(rows, i0, i1, use_reentrant=False) if train else rows(i0, i1))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


def scores(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`contextual_attention` with the context's dense mask."""
    assert isinstance(call.encoding, ScoreBias), "the plan gives 'scores' to a ScoreBias"
    allowed = call.context.allowed(call.causal, call.options.pattern)
    return contextual_attention(
        call.q, call.k, call.v, call.encoding, allowed, call.scale, call.options
    )
