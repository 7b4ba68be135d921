"""The runners of bias encodings: one function per backend, chosen by :func:`plan_bias`.

:func:`bias_attention` asks :func:`~posenc.attn.bias_plan.plan_bias` which backend runs
(the table of runners and when each applies is there) and calls its runner here. Each
runner takes its mask from the :class:`~posenc.attn.context.AttentionContext`: a flex
``mask_mod``, or the dense mask the context builds once per forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..base import BiasEncoding
from ..functional.dtypes import math_dtype
from ..positions import query_offset
from .bias_blocks import distance_attention, distance_values
from .bias_grad import bias_flash_attention
from .bias_plan import AttnShape, plan_bias
from .bias_rows import PARTS, rows_attention
from .context import AttentionContext
from .contextual import contextual_attention
from .explicit import explicit_attention
from .flash_blocks import block_size
from .flex import flex_attention
from .linear_bias import linear_bias_sdpa
from .masks import zero_dead_rows
from .pattern import PLAIN, ScoreOptions
from .shaw_grad import shaw_attention

__all__ = ["bias_attention", "flex_run"]


def bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding,
    context: AttentionContext,
    *,
    causal: bool,
    scale: float,
    backend: str,
    table: torch.Tensor | None = None,
    options: ScoreOptions = PLAIN,
    finite: bool = True,
) -> torch.Tensor:
    """Attention with a bias encoding, on the backend :func:`plan_bias` picks.

    Args:
        q, k, v, scale, backend: as :func:`posenc.attention` (checked there).
        encoding: a bias encoding with ``n_heads`` equal to the query heads.
        context: the positions and masks of this call.
        causal: mask keys after their query.
        table: the materialised bias for these positions (``encoding.bias(q_positions,
            k_positions)``, checked by :func:`posenc.attention`), computed once by the
            caller and shared by its layers; None: computed here where a runner needs it.
        options: the window or chunk, softcap and sinks.
        finite: whether every value is finite (else the ``math`` runner keeps masked
            values out of the outputs).

    Shapes:
        q ``[batch, heads, q_len, d]``, k, v ``[batch, kv_heads, k_len, d]`` ->
        ``[batch, heads, q_len, d]`` in the dtype of ``q``.
    """
    if q.shape[1] != encoding.n_heads:
        raise ValueError(
            f"q has {q.shape[1]} heads but the encoding {type(encoding).__name__} has "
            f"n_heads={encoding.n_heads}"
        )
    width = getattr(encoding, "head_dim", None)  # the width of a table read with q (Shaw, CoPE)
    if width is not None and q.shape[-1] != width:
        raise ValueError(
            f"q has head_dim={q.shape[-1]} but the encoding {type(encoding).__name__} has "
            f"head_dim={width} (the width of its tables): create it with head_dim="
            f"{q.shape[-1]}"
        )
    needs_grad = any(t.requires_grad for t in (q, k, v)) or (
        torch.is_grad_enabled()
        and (
            any(p.requires_grad for p in encoding.parameters())
            or (table is not None and table.requires_grad)
        )
    )
    plan = plan_bias(
        encoding,
        AttnShape.of(q, k),
        context.positions,
        masked=context.masks is not None,
        causal=causal,
        needs_grad=needs_grad,
        device=q.device,
        backend=backend,
        traits=options.traits(finite),
        table_given=table is not None,
    )
    run = _RUNNERS[plan.runner]
    return run(q, k, v, encoding, context, plan, causal, scale, table, options)


def _scores(q, k, v, encoding, context, plan, causal, scale, table, options):
    """A bias of each row's scores (CoPE), by blocks of rows (:mod:`.contextual`)."""
    allowed = context.allowed(causal, options.pattern)
    return contextual_attention(q, k, v, encoding, allowed, scale, options)


def _shaw(q, k, v, encoding, context, plan, causal, scale, table, options):
    """Shaw's attention blockwise, forward and backward (:mod:`~posenc.attn.shaw_grad`)."""
    tables = encoding.relative_tables()
    assert tables is not None, "plan_bias gives 'shaw' to encodings with relative_tables"
    key_table, value_table, max_distance = tables
    p = context.positions
    return shaw_attention(q, k, v, key_table, value_table, max_distance, p.q, p.k, scale, causal)


def _linear(q, k, v, encoding, context, plan, causal, scale, table, options):
    """The fused linear-bias path (:func:`~posenc.attn.linear_bias.linear_bias_sdpa`);
    padding, segments and the window or chunk reach it as the dense mask, which holds the
    causal part."""
    mask = dead = None
    if context.masks is not None or options.pattern.local:
        mask, dead = context.allowed(causal, options.pattern)
    p = context.positions
    out = linear_bias_sdpa(
        q,
        k,
        v,
        plan.slopes,
        p.q,
        p.k,
        causal and mask is None,
        scale,
        plan.blocks,
        mask,
        q_range=None if plan.blocks is None else p.q_range(),  # read by the plan already
    )
    return zero_dead_rows(out, dead)


def _blocks(q, k, v, encoding, context, plan, causal, scale, table, options):
    """A shift-invariant bias from its ``2L - 1`` distances, by blocks of queries
    (:mod:`~posenc.attn.bias_blocks`); a given table is not read (the distances are the
    same values, and their backward reaches the encoding's parameters)."""
    return _by_distance(q, k, v, encoding, scale, causal)


def _by_distance(q, k, v, encoding, scale, causal, block=None):
    """:func:`~posenc.attn.bias_blocks.distance_attention` over the encoding's distance
    values for these ``q_len`` queries and keys."""
    values = distance_values(encoding, q.shape[2], causal, q.device)
    return distance_attention(q, k, v, values, scale, causal, block)


def _rows(q, k, v, encoding, context, plan, causal, scale, table, options):
    """A bias of the positions alone a block of query rows at a time
    (:mod:`~posenc.attn.bias_rows`); under a causal mask over the indices, the first
    queries whose bias is shift-invariant (:meth:`~posenc.base.BiasEncoding.invariant_below`:
    FIRE's before its threshold) see only each other, so they run on the distance blocks
    (:func:`_blocks`) and the rows path takes the rest."""
    p, n = context.positions, q.shape[2]
    first = _invariant_queries(encoding, n) if causal and not p.explicit else 0
    if first == n:
        return _blocks(q, k, v, encoding, context, plan, causal, scale, table, options)
    rows, tensors = encoding.block_rows(p.q, p.k)
    if first == 0:
        return rows_attention(q, k, v, rows, tensors, scale, causal)
    # each part in the blocks the whole call would take: fewer kernel calls
    head = (t[:, :, :first] for t in (q, k, v))
    out = _by_distance(*head, encoding, scale, causal, block=min(first, block_size(n)))
    rest = q[:, :, first:]
    block = min(n - first, block_size(n, PARTS))
    rest = rows_attention(rest, k, v, rows, tensors, scale, causal, block, q_offset=first)
    return torch.cat([out, rest], dim=2)


def _invariant_queries(encoding: BiasEncoding, n: int) -> int:
    """How many of the queries at positions ``0..n-1`` come before
    ``encoding.invariant_below()`` (strictly: at the bound FIRE's normaliser is a tie,
    whose gradient is shared with the query's position)."""
    bound = encoding.invariant_below()
    if not bound > 0:  # none (or a NaN threshold: the rows path's result is NaN as well)
        return 0
    return n if bound >= n else math.ceil(bound)


def _flex(q, k, v, encoding, context, plan, causal, scale, table, options):
    """Flex attention with the encoding's ``score_mod`` and the context's block mask;
    default positions stay None, so the score_mod reads indices."""
    p = context.positions
    qp, kp = (p.q, p.k) if p.explicit else (None, None)
    q_offset = 0 if p.explicit else query_offset(p.q_len, p.k_len)
    mod = encoding.score_mod(qp, kp, q=q, q_offset=q_offset, scale=scale)
    return flex_run(q, k, v, mod, context, causal, scale, options)


def flex_run(q, k, v, score_mod, context, causal, scale, options) -> torch.Tensor:
    """Flex attention with ``score_mod`` (None: plain scores), the context's block mask of
    the call's pattern (the blocks outside a window or chunk are skipped) and softcap;
    shared by bias encodings and attention without a bias (sinks never reach it)."""
    p = context.positions
    qp, kp = (p.q, p.k) if p.explicit else (None, None)
    mask = context.block_mask(q.shape[0], causal, options.pattern)
    return flex_attention(
        q,
        k,
        v,
        score_mod,
        qp,
        kp,
        causal,
        scale,
        block_mask=mask,
        softcap=options.softcap,
    )


def _flash(q, k, v, encoding, context, plan, causal, scale, table, options):
    """The CPU flash kernel with the bias and a blockwise backward
    (:func:`~posenc.attn.bias_grad.bias_flash_attention`): the masks folded into the bias
    as ``-inf``, the causal mask by index (the kernel skips the blocks above the diagonal)
    where the positions order keys as their index does."""
    bias = _table(q, encoding, context, plan, scale, table)
    by_index = causal and context.positions.index_ordered()
    dead = None
    if context.masks is not None or options.pattern.local or (causal and not by_index):
        allowed, dead = context.allowed(causal, options.pattern)
        bias = bias.masked_fill(~allowed, float("-inf"))
    out = bias_flash_attention(q, k, v, bias, scale, by_index)
    return zero_dead_rows(out, dead)


def _dense(q, k, v, encoding, context, plan, causal, scale, table, options):
    """SDPA (``sdpa``) or softmax in float32 (``math``) with the materialised bias."""
    bias = _table(q, encoding, context, plan, scale, table)
    allowed = context.allowed(causal, options.pattern)
    mask = dead = None
    if allowed is not None:
        mask, dead = allowed
    if plan.runner == "sdpa":
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        # a 4-D mask keeps CPU SDPA on its fast kernel (3-D falls back, 2-6x slower); the
        # CPU kernel takes a float32 mask with bf16/fp16 inputs, so the bias is not rounded
        mask = bias if bias.dim() == 4 else bias.unsqueeze(0)  # [b | 1, h, q_len, k_len]
        mask = mask.to(math_dtype(q.dtype) if q.device.type == "cpu" else q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
    else:
        p = context.positions
        value_term = None
        if encoding.adds_to_values:

            def value_term(probs):
                return encoding.value_term(probs, p.q, p.k)

        out = explicit_attention(
            q,
            k,
            v,
            scale,
            bias=bias,
            allowed=mask,
            softcap=options.softcap,
            sinks=options.sinks,
            value_term=value_term,
        )
    return zero_dead_rows(out, dead)


def _table(q, encoding, context, plan, scale, given):
    """The bias table ``plan`` runs on: ``given`` when the caller computed it, else built
    here. Shapes: -> ``[(b,) h, q_len, k_len]``."""
    if given is not None:
        return given
    p = context.positions
    return encoding.bias(p.q, p.k, q=q, scale=scale)


_RUNNERS: dict[str, Callable[..., torch.Tensor]] = {
    "scores": _scores,
    "shaw": _shaw,
    "linear": _linear,
    "blocks": _blocks,
    "rows": _rows,
    "flex": _flex,
    "flash": _flash,
    "sdpa": _dense,
    "math": _dense,
}
