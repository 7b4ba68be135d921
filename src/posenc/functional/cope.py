"""CoPE: contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar 2024,
"Contextual Position Encoding: Learning to Count What's Important", arXiv:2405.18719).

Positions are counted in the context, not in tokens: a query ``i`` gates every key it sees,
``g_ij = σ(s_ij)`` with ``s_ij`` the scaled score ``q_i·k_j·scale``, and the position of the
key ``j`` is the number of gated keys from it to the query,

    p_ij = Σ_{t=j..i} g_it         (a fraction: gates are in (0, 1))

so a head may count words, sentences or any token kind it learns to gate. Learned position
vectors ``e[0..P-1]`` (``head_dim`` wide, shared by the heads) are read at ``p_ij`` by
linear interpolation, through their scores with the query: the score gains

    b_ij = (1 − w)·q_i·e[⌊p_ij⌋] + w·q_i·e[⌈p_ij⌉],   w = p_ij − ⌊p_ij⌋

with ``p_ij`` clamped to ``P − 1``. The gates depend on every score of a row, so the bias
needs the row's scores before the softmax (:mod:`posenc.attn.runners.scores`).
"""

from __future__ import annotations

import torch

from .dtypes import math_dtype

__all__ = ["cope_bias", "cope_positions"]


def cope_positions(scores: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """The contextual positions ``p_ij = Σ_{t>=j} g_it`` over the keys a query sees
    (``allowed``; keys it does not see gate nothing), with ``g = σ(scores)``.

    Shapes:
        scores ``[..., q_len, k_len]`` (scaled), allowed broadcastable to it (True: seen)
        or None -> ``[..., q_len, k_len]``, in the dtype of ``scores``.
    """
    gates = torch.sigmoid(scores)
    if allowed is not None:
        gates = gates.masked_fill(~allowed, 0.0)
    return gates.flip(-1).cumsum(dim=-1).flip(-1)


def cope_bias(q: torch.Tensor, table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``q_i·e[p_ij]``, the position vectors ``table`` interpolated at ``positions``
    (clamped to the last row), in float32 (float64 if an input is float64); NaN where a
    position is NaN (a NaN score the row sees).

    Shapes:
        q ``[b, h, q_len, d]``, table ``[P, d]``, positions ``[b, h, q_len, k_len]`` ->
        ``[b, h, q_len, k_len]``.
    """
    dtype = math_dtype(q.dtype, table.dtype, positions.dtype)
    positions = positions.to(dtype).clamp(max=table.shape[0] - 1)
    unknown = positions.isnan()  # a NaN gate the row sees: the row's bias is NaN
    positions = positions.masked_fill(unknown, 0.0)  # (no index to read at NaN)
    logits = q.to(dtype) @ table.to(dtype).T  # [b, h, q_len, P]
    low = positions.floor()
    frac = positions - low
    below = logits.gather(-1, low.long())
    above = logits.gather(-1, positions.ceil().long())
    return (below * (1 - frac) + above * frac).masked_fill(unknown, float("nan"))
