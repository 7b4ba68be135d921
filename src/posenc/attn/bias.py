"""The runners of bias encodings: one function per backend, chosen by :func:`plan_bias`.

:func:`bias_attention` asks :func:`~posenc.attn.bias_plan.plan_bias` which backend runs
(the table of runners and when each applies is there) and calls its runner here. Each
runner takes its mask from the :class:`~posenc.attn.context.AttentionContext`: a flex
``mask_mod``, or the dense mask the context builds once per forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..base import BiasEncoding
from ..functional.dtypes import math_dtype
from ..positions import query_offset
from .bias_blocks import blockwise_bias_attention, shift_table
from .bias_grad import bias_flash_attention
from .bias_plan import AttnShape, plan_bias
from .context import AttentionContext
from .flex import flex_attention
from .linear_bias import linear_bias_sdpa
from .masks import zero_dead_rows
from .shaw_grad import shaw_attention

__all__ = ["bias_attention"]


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

    Shapes:
        q ``[batch, heads, q_len, d]``, k, v ``[batch, kv_heads, k_len, d]`` ->
        ``[batch, heads, q_len, d]`` in the dtype of ``q``.
    """
    if q.shape[1] != encoding.n_heads:
        raise ValueError(
            f"q has {q.shape[1]} heads but the encoding {type(encoding).__name__} has "
            f"n_heads={encoding.n_heads}"
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
    )
    run = _RUNNERS[plan.runner]
    return run(q, k, v, encoding, context, plan, causal, scale, table)


def _shaw(q, k, v, encoding, context, plan, causal, scale, table):
    """Shaw's attention blockwise, forward and backward (:mod:`~posenc.attn.shaw_grad`)."""
    tables = encoding.relative_tables()
    assert tables is not None, "plan_bias gives 'shaw' to encodings with relative_tables"
    key_table, value_table, max_distance = tables
    p = context.positions
    return shaw_attention(q, k, v, key_table, value_table, max_distance, p.q, p.k, scale, causal)


def _linear(q, k, v, encoding, context, plan, causal, scale, table):
    """The fused linear-bias path (:func:`~posenc.attn.linear_bias.linear_bias_sdpa`);
    padding and segments reach it as the dense mask, which holds the causal part."""
    mask = dead = None
    if context.masks is not None:
        mask, dead = context.allowed(causal)
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


def _blocks(q, k, v, encoding, context, plan, causal, scale, table):
    """A shift-invariant bias by blocks of queries (:mod:`~posenc.attn.bias_blocks`)."""
    return blockwise_bias_attention(q, k, v, encoding, scale, causal)


def _flex(q, k, v, encoding, context, plan, causal, scale, table):
    """Flex attention with the encoding's ``score_mod`` and the context's block mask;
    default positions stay None, so the score_mod reads indices."""
    p = context.positions
    qp, kp = (p.q, p.k) if p.explicit else (None, None)
    q_offset = 0 if p.explicit else query_offset(p.q_len, p.k_len)
    mod = encoding.score_mod(qp, kp, q=q, q_offset=q_offset, scale=scale)
    mask = context.block_mask(q.shape[0], causal)
    return flex_attention(q, k, v, mod, qp, kp, causal, scale, block_mask=mask)


def _flash(q, k, v, encoding, context, plan, causal, scale, table):
    """The CPU flash kernel with the bias and a blockwise backward
    (:func:`~posenc.attn.bias_grad.bias_flash_attention`): the masks folded into the bias
    as ``-inf``, the causal mask by index (the kernel skips the blocks above the diagonal)
    where the positions order keys as their index does."""
    bias = _table(q, encoding, context, plan, scale, table)
    by_index = causal and context.positions.index_ordered()
    dead = None
    if context.masks is not None or (causal and not by_index):
        allowed, dead = context.allowed(causal)
        bias = bias.masked_fill(~allowed, float("-inf"))
    out = bias_flash_attention(q, k, v, bias, scale, by_index)
    return zero_dead_rows(out, dead)


def _dense(q, k, v, encoding, context, plan, causal, scale, table):
    """SDPA (``sdpa``) or softmax in float32 (``math``) with the materialised bias."""
    bias = _table(q, encoding, context, plan, scale, table)
    allowed = context.allowed(causal)
    dead = None
    if allowed is not None:
        bias = bias.masked_fill(~allowed[0], float("-inf"))
        dead = allowed[1]
    if plan.runner == "sdpa":
        # a 4-D mask keeps CPU SDPA on its fast kernel (3-D falls back, 2-6x slower); the
        # CPU kernel takes a float32 mask with bf16/fp16 inputs, so the bias is not rounded
        mask = bias if bias.dim() == 4 else bias.unsqueeze(0)  # [b | 1, h, q_len, k_len]
        mask = mask.to(math_dtype(q.dtype) if q.device.type == "cpu" else q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
    else:
        p = context.positions
        out = _math_attention(q, k, v, bias, scale, encoding, p.q, p.k)
    return zero_dead_rows(out, dead)


def _table(q, encoding, context, plan, scale, given):
    """The bias table ``plan`` runs on: ``given`` when the caller computed it, else built
    here. Shapes: -> ``[(b,) h, q_len, k_len]``."""
    if given is not None:
        return given
    p = context.positions
    if plan.table == "shift":
        return shift_table(encoding, p.q_len, q.device)  # 2L - 1 values, not L²
    return encoding.bias(p.q, p.k, q=q, scale=scale)


_RUNNERS: dict[str, Callable[..., torch.Tensor]] = {
    "shaw": _shaw,
    "linear": _linear,
    "blocks": _blocks,
    "flex": _flex,
    "flash": _flash,
    "sdpa": _dense,
    "math": _dense,
}


def _math_attention(q, k, v, bias, scale, encoding, q_positions, k_positions):
    """softmax(q kᵀ · scale + bias) v in float32 (float64 for float64 inputs), plus the
    encoding's value term if any.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]``, bias ``[(b,) h, q_len, k_len]``
        -> ``[b, h, q_len, d]`` in the dtype of ``q``.
    """
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [b, h, k_len, d]
    v = v.repeat_interleave(group, dim=1)
    dtype = math_dtype(q.dtype)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale + bias.to(dtype)
    # a query that sees no key gets zeros, as from the SDPA and flex kernels (not NaN)
    probs = scores.softmax(dim=-1).nan_to_num(0.0)  # [b, h, q_len, k_len]
    out = probs @ v.to(dtype)
    if encoding.adds_to_values:
        out = out + encoding.value_term(probs, q_positions, k_positions).to(dtype)
    return out.to(q.dtype)
