"""The ``sdpa`` runner: ``torch.nn.functional.scaled_dot_product_attention`` with the
context's dense mask and, for a bias encoding, the materialised bias as its float mask."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ...functional.dtypes import math_dtype
from ..masks import zero_dead_rows

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["sdpa"]


def sdpa(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: SDPA with the dense mask (the causal part, the window or chunk, padding
    and documents), the bias added where the plan has a table; rows that see no key are
    opened for the kernel and zeroed after.

    Shapes:
        q ``[b, h, q_len, d]``, k ``[b, kv_h, k_len, d]``, v ``[b, kv_h, k_len, d_v]`` ->
        ``[b, h, q_len, d_v]``.
    """
    q, k, v = call.q, call.k, call.v
    allowed = call.context.allowed(call.causal, call.options.pattern)
    mask, dead = (None, None) if allowed is None else allowed
    if plan.table is not None:
        bias = call.bias_table()
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        # a 4-D mask keeps CPU SDPA on its fast kernel (3-D falls back, 2-6x slower); the
        # CPU kernel takes a float32 mask with bf16/fp16 inputs, so the bias is not rounded
        mask = bias if bias.dim() == 4 else bias.unsqueeze(0)  # [b | 1, h, q_len, k_len]
        mask = mask.to(math_dtype(q.dtype) if q.device.type == "cpu" else q.dtype)
    width = v.shape[-1]
    if width < q.shape[-1]:  # PoPE's wider q, k: one width for SDPA
        v = F.pad(v, (0, q.shape[-1] - width))
    gqa = q.shape[1] != k.shape[1]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=call.scale, enable_gqa=gqa)
    return zero_dead_rows(out[..., :width], dead)
