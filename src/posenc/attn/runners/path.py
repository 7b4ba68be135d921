"""The ``path`` runner: attention whose scores pass through transforms of the tokens between
each key and its query (PaTH, Yang et al. 2025, arXiv:2505.16381), by blocks of query rows.

A score ``q_iᵀ H_i ··· H_{j+1} k_j`` is no dot product of fixed vectors, so no fused kernel
takes it: a block of ``B`` query rows gets its scores from
:func:`~posenc.functional.path.path_scores` (blockwise, the UT representation of the
transforms' products: ``O(B·k_len·(d + C))``), then the explicit softmax
(:func:`~posenc.attn.runners.math.probabilities`: masks, softcap, sinks) and the values.
When a backward will run, each block runs under activation checkpointing
(:func:`~posenc.attn.runners.scores.row_blocks`): the backward recomputes it, and nothing
of ``[batch, heads, L, L]`` (nor of ``[L, L, d]``) is kept between the forward and the
backward.

Order is the tokens': a query (one of the last ``q_len`` of the keys' tokens) sees no key
after its own token, whatever the positions say, besides what the masks hide. A padded
key's transform is the identity (a pad is not there). Inputs that are not all finite are
computed with their non-finite values zeroed, and a score is then NaN where its query, its
key or a transform between them is not finite
(:func:`~posenc.functional.path.path_nonfinite`): a row that sees such a score is NaN, a
row that does not is untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ...base import InputTransforms
from ...functional.path import PATH_BLOCK, path_nonfinite, path_scores
from ..call import ScoreOptions
from ..masks import zero_dead_rows
from .math import probabilities, read_values
from .scores import mask_rows, needs_backward, row_blocks, rows_per_block

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["path", "path_attention"]


def path_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    transforms: torch.Tensor,
    allowed: torch.Tensor | None,
    scale: float,
    options: ScoreOptions,
    *,
    finite: bool = True,
    block: int | None = None,
) -> torch.Tensor:
    """``softmax(q_iᵀ H_i ··· H_{j+1} k_j · scale) v`` over the keys at or before each
    query's token that ``allowed`` lets it see, a block of query rows at a time, in float32
    (float64 for float64 inputs).

    Args:
        q: ``[b, h, q_len, d]``, the last ``q_len`` of the keys' tokens.
        k, v: ``[b, kv_h, k_len, d]``.
        transforms: ``[b, kv_h, k_len, d]``, each key token's ``a_t`` (``H_t = I − a_t
            a_tᵀ``; zero for none).
        allowed: broadcastable to ``[b, h, q_len, k_len]``, True where a query may see a
            key, or None.
        scale: the score scale.
        options: the softcap and sinks (the window or chunk is in ``allowed``).
        finite: whether q, k and the transforms are all finite (else the scores that
            read a non-finite one are NaN: the module's docstring).
        block: query rows per block; default: about
            :data:`~posenc.attn.runners.scores.BLOCK_SCORES` scores a block, a multiple
            of the transforms' block.

    Shapes:
        -> ``[b, h, q_len, d_v]`` in the dtype of ``q``.
    """
    q_len, k_len = q.shape[2], k.shape[2]
    block = rows_per_block(q, k_len, PATH_BLOCK) if block is None else block
    nonfinite = None
    if not finite:
        nonfinite = path_nonfinite(q, k, transforms)
        q, k, transforms = (t.nan_to_num(0.0, 0.0, 0.0) for t in (q, k, transforms))
    train = needs_backward(q, k, v, transforms, options.sinks)
    tokens = torch.arange(k_len, device=q.device)

    def rows(i0: int, i1: int) -> torch.Tensor:
        end = k_len - q_len + i1  # the keys up to the block's last query
        scores = path_scores(q[:, :, i0:i1], k[:, :, :end], transforms[:, :, :end]) * scale
        scores = F.pad(scores, (0, k_len - end))  # [b, h, rows, k_len]
        if nonfinite is not None:
            scores = scores.masked_fill(nonfinite[:, :, i0:i1], float("nan"))
        own = tokens <= (k_len - q_len + torch.arange(i0, i1, device=q.device))[:, None]
        seen = mask_rows(allowed, i0, i1)
        seen = own if seen is None else seen & own  # [.., rows, k_len]
        probs = probabilities(scores, allowed=seen, softcap=options.softcap, sinks=options.sinks)
        return read_values(probs, v)

    out = row_blocks(rows, q_len, block, train)
    return out.to(q.dtype)


def path(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`path_attention` with the call's transforms (``call.table``), the
    identity for padded keys, and the context's dense mask."""
    assert isinstance(call.encoding, InputTransforms), "the plan gives 'path' to PaTH"
    transforms = call.table
    assert transforms is not None, "posenc.attention checks that the transforms are given"
    masks = call.context.masks
    if masks is not None and masks.key_padding_mask is not None:
        real = masks.key_padding_mask[:, None, :, None]  # [b, 1, k_len, 1]
        transforms = transforms.masked_fill(~real, 0.0)
    allowed = call.context.allowed(call.causal, call.options.pattern)
    mask, dead = (None, None) if allowed is None else allowed
    out = path_attention(
        call.q,
        call.k,
        call.v,
        transforms,
        mask,
        call.scale,
        call.options,
        finite=call.finite,
    )
    return zero_dead_rows(out, dead)
