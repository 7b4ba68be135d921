"""The ``weights`` runner: attention whose weights are not a softmax of the scores
(stick-breaking, Tan et al. 2025, arXiv:2410.17980), by blocks of query rows.

An encoding that declares :class:`~posenc.base.ScoreWeights` turns each row's scaled
scores over the keys it sees into that row's weights; the output is the weights times the
values. No fused kernel computes them, so a block of ``B`` query rows is written out
explicitly, as the ``scores`` runner does (:func:`~posenc.attn.runners.scores.row_blocks`:
under activation checkpointing when a backward will run, so nothing of ``[batch, heads, L,
L]`` is kept between the forward and the backward). Memory: a few ``[batch, heads, B,
k_len]`` tensors at a time; time ``O(L²·d)``.

The query's own key is the key at its position (a static cache's unwritten slots lie after
it). The keys break the stick in the order they are held, nearest (last) first: the
sequence's order in a prompt, a cache that appends, padding and packing; a model keeps
every key of a stick-breaking layer (no rolling buffer, whose slots wrap around).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from ...base import ScoreWeights
from ...functional.dtypes import math_dtype
from ...functional.stick_breaking import own_keys
from ..call import ScoreOptions
from ..masks import zero_dead_rows
from .scores import mask_rows, needs_backward, row_blocks, rows_per_block

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["SMALLER", "weighted_attention", "weights"]

#: its blocks hold this many times fewer rows than the ``scores`` runner's: each stops at
#: its last query's key (the default positions), so smaller blocks skip more of the upper
#: triangle (L 1024, 8 heads of 64, 2 cores: 73 ms forward with 512 rows, 51 with 128)
SMALLER = 4


def weighted_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: ScoreWeights,
    allowed: tuple[torch.Tensor, torch.Tensor],
    own: torch.Tensor,
    scale: float,
    options: ScoreOptions,
    *,
    finite: bool = True,
    block: int | None = None,
    by_index: bool = False,
) -> torch.Tensor:
    """``W v`` with ``W = encoding.score_weights(cap(q kᵀ·scale), seen, own)``, a block
    of query rows at a time.

    Args:
        q: ``[b, h, q_len, d]``; k, v ``[b, kv_h, k_len, d]``, ``q_len <= k_len``.
        encoding: a :class:`~posenc.base.ScoreWeights` (stick-breaking).
        allowed: ``(mask, dead)`` from :meth:`AttentionContext.allowed
            <posenc.attn.masks.AttentionContext.allowed>` (mask ``[q_len, k_len]`` or ``[b |
            1, 1, q_len | 1, k_len]``, True where a query may see a key).
        own: True at each query's own key, shaped as the mask
            (:func:`~posenc.functional.stick_breaking.own_keys`).
        scale: the score scale.
        options: the softcap (the window or chunk is in ``allowed``; sinks are refused by
            the planner).
        finite: whether every input is finite; if not, a value no query sees stays out of
            every output, and a row that sees a non-finite value is NaN.
        block: query rows per block; default a :data:`SMALLER` share of
            :func:`~posenc.attn.runners.scores.rows_per_block`.
        by_index: the queries are the last of the keys and no query sees a key after its
            own (the default positions): each block stops at its last query's key.

    Shapes:
        -> ``[b, h, q_len, d]`` in the dtype of ``q``.
    """
    h, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    mask, dead = allowed
    block = max(1, rows_per_block(q, k_len) // SMALLER) if block is None else block
    train = needs_backward(q, k, v, *cast(torch.nn.Module, encoding).parameters())
    dtype = math_dtype(q.dtype, k.dtype, v.dtype)
    keys = k.to(dtype).repeat_interleave(h // k.shape[1], 1)  # [b, h, k_len, d], once
    values = v.to(dtype).repeat_interleave(h // v.shape[1], 1)
    bad = None if finite else ~values.isfinite()
    if bad is not None:
        values = values.masked_fill(bad, 0.0)

    def rows(i0: int, i1: int) -> torch.Tensor:
        end = k_len - q_len + i1 if by_index else k_len  # the keys the block may see
        scores = (q[:, :, i0:i1].to(dtype) @ keys[:, :, :end].transpose(-1, -2)) * scale
        if options.softcap is not None:
            scores = options.softcap * torch.tanh(scores / options.softcap)
        seen = cast(torch.Tensor, mask_rows(mask, i0, i1))[..., :end]  # a mask, never None
        mine = cast(torch.Tensor, mask_rows(own, i0, i1))[..., :end]
        out = encoding.score_weights(scores, seen, mine) @ values[:, :, :end]
        if bad is None:
            return out
        reads_bad = (seen.to(dtype) @ bad[:, :, :end].to(dtype)) > 0  # a non-finite value it sees
        return out.masked_fill(reads_bad, float("nan"))

    out = zero_dead_rows(row_blocks(rows, q_len, block, train), dead)
    return out.to(q.dtype)


def weights(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`weighted_attention` with the context's dense mask."""
    enc = call.encoding
    assert isinstance(enc, ScoreWeights), "the plan gives 'weights' to a ScoreWeights"
    allowed = call.context.allowed(call.causal, call.options.pattern)
    assert allowed is not None, "the planner gives 'weights' causal calls only"
    positions = call.context.positions
    return weighted_attention(
        call.q,
        call.k,
        call.v,
        enc,
        allowed,
        # each query's own key: the same for every layer of a forward, made once
        call.context.derived("own_keys", lambda: own_keys(positions.q, positions.k)),
        call.scale,
        call.options,
        finite=call.finite,
        by_index=not positions.explicit,
    )
