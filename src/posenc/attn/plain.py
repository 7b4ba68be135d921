"""Attention with no bias: the runner :func:`~posenc.attn.backends.plan_plain` picks, for
NoPE, rotated q and k, and the forget bias riding in extra key coordinates
(:mod:`posenc.attn.forget`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .backends import AttnShape, plan_plain
from .bias import flex_run
from .context import AttentionContext
from .explicit import explicit_attention
from .masks import zero_dead_rows
from .pattern import ScoreOptions

__all__ = ["plain_attention"]


def plain_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    context: AttentionContext,
    causal: bool,
    scale: float,
    backend: str,
    options: ScoreOptions,
    finite: bool,
) -> torch.Tensor:
    """Attention without a bias on the runner :func:`plan_plain` picks: SDPA with the
    kernel's own causal mask over default positions (top-left; one query sees every key),
    flex attention, the explicit softmax, or SDPA with the context's dense mask.

    Shapes:
        q, k ``[b, h | kv_h, len, d]``, v ``[b, kv_h, k_len, d_v]`` (``d_v <= d``: PoPE's
        values keep the input width) -> ``[b, h, q_len, d_v]``.
    """
    needs_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (q, k, v, options.sinks) if t is not None
    )
    runner = plan_plain(
        AttnShape.of(q, k),
        context.positions,
        masked=context.masks is not None,
        needs_grad=needs_grad,
        device=q.device,
        backend=backend,
        traits=options.traits(finite),
    )
    q_len, k_len, width = q.shape[2], k.shape[2], v.shape[-1]
    gqa = q.shape[1] != k.shape[1]
    if runner != "math" and width < q.shape[-1]:  # PoPE's wider q, k: one width for SDPA
        v = F.pad(v, (0, q.shape[-1] - width))  # (its CPU kernels fall back to math else)
    if runner == "fast":
        is_causal = causal and q_len == k_len
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=is_causal, scale=scale, enable_gqa=gqa
        )
        return out[..., :width]
    if runner == "flex":
        return flex_run(q, k, v, None, context, causal, scale, options)[..., :width]
    allowed = context.allowed(causal, options.pattern)
    mask, dead = (None, None) if allowed is None else allowed
    if runner == "math":
        out = explicit_attention(
            q, k, v, scale, allowed=mask, softcap=options.softcap, sinks=options.sinks
        )
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return zero_dead_rows(out[..., :width], dead)
