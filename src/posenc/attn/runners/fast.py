"""The ``fast`` runner: SDPA with its own causal mask, for attention without a bias over
the default positions (the queries the last ``q_len`` keys) and no masks: the fused
kernels at their fastest, no mask tensor at all."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["fast"]


def fast(call: Call, plan: Plan) -> torch.Tensor:
    """The runner. SDPA's causal mask is top-left, so it is used with one query (which sees
    every key) or as many queries as keys.

    Shapes:
        q ``[b, h, q_len, d]``, k ``[b, kv_h, k_len, d]``, v ``[b, kv_h, k_len, d_v]``
        (``d_v <= d``: PoPE's values keep the input width) -> ``[b, h, q_len, d_v]``.
    """
    q, k, v = call.q, call.k, call.v
    width = v.shape[-1]
    if width < q.shape[-1]:  # one width for SDPA (its CPU kernels fall back to math else)
        v = F.pad(v, (0, q.shape[-1] - width))
    # a branch, not a value: SDPA takes no SymBool (a length torch.compile or torch.export
    # made symbolic), and a branch guards on it
    is_causal = False
    if q.shape[2] == k.shape[2]:
        is_causal = call.causal
    gqa = q.shape[1] != k.shape[1]
    out = F.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, scale=call.scale, enable_gqa=gqa
    )
    return out if width == q.shape[-1] else out[..., :width]
