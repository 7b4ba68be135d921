"""The ``math`` runner: attention with its softmax written out in float32, the path that
runs everything.

:func:`explicit_attention` forms the scores, adds a bias, soft-caps them (Gemma 2, Team
Gemma 2024, arXiv:2408.00118), masks them, takes the softmax over the keys and, where
given, one sink logit per head that carries no value (gpt-oss, OpenAI 2025; Xiao et al.
2023, arXiv:2309.17453, for attention sinks), then reads the values. It is the ``math``
backend of :func:`posenc.attention` and the path of everything the fused kernels cannot
do: values added by the encoding (Shaw), scores changed before the softmax (softcap,
sinks), and values that hold NaN or infinity.

A key or value no query may see never reaches an output here. Kernels add the mask's
``-inf`` to a masked slot's score and multiply its probability (0) by its value, and
``-inf + NaN`` and ``0 · NaN`` are NaN: a NaN in a future key, a pad or a stale cache slot
would reach every query. Here masked scores are replaced (not added to), non-finite values
are zeroed before the product, and a row that gives weight to one gets NaN, as it would
with the value in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ...base import RelativeTables
from ...functional.dtypes import math_dtype
from ..masks import zero_dead_rows

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = ["explicit_attention", "math", "probabilities", "read_values", "softmax_limits"]


def probabilities(
    scores: torch.Tensor,
    *,
    allowed: torch.Tensor | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """The attention probabilities of scaled (and biased) ``scores``: soft-capped, masked,
    the softmax over the keys and the heads' sink logits (:func:`softmax_limits`), the
    sinks' column left out (a row then sums to ``1 - p_sink``).

    A score a query may not see (``allowed`` False) is replaced, not added to, so a NaN
    there never reaches the row; a NaN the row does see (a score or a sink) makes the row
    NaN, as plain attention does.

    Shapes:
        scores ``[b, h, q_len, k_len]``; allowed broadcastable to it; sinks ``[h]`` -> the
        shape of ``scores``, in its dtype.
    """
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is None:
        return softmax_limits(scores)
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return softmax_limits(torch.cat((scores, sink), dim=-1))[..., :-1]


def softmax_limits(scores: torch.Tensor) -> torch.Tensor:
    """The softmax over the last dimension, with its limits where scores are infinite:
    ``+inf`` scores share the row's weight equally (the limit as they grow), ``-inf``
    scores get none, a row of ``-inf`` only (no key seen) gets zeros, and a row with a NaN
    is NaN. ``Tensor.softmax`` gives NaN for the first and third (``inf - inf``).

    ``+inf`` becomes the dtype's largest float, which the softmax's shift by the row's
    maximum turns into ``exp(0) = 1`` beside ``exp(-huge) = 0`` for every finite score: two
    passes more than the plain softmax (the clamp and the row maximum), not a branch on
    values (no host read).

    Shapes:
        scores ``[..., n]`` -> ``[..., n]``.
    """
    scores = scores.clamp(max=torch.finfo(scores.dtype).max)  # NaN stays NaN
    empty = scores.amax(dim=-1, keepdim=True) == float("-inf")  # [..., 1]: no key seen
    return scores.softmax(dim=-1).masked_fill(empty, 0.0)


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    *,
    bias: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    value_term: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``softmax(cap(q kᵀ · scale + bias) | mask, sink) v`` in float32 (float64 for float64
    inputs).

    Args:
        q, k, v: the attention inputs; ``heads`` a multiple of ``kv_heads``.
        scale: the score scale.
        bias: added to the scaled scores, or None.
        allowed: True where a query may see a key (the other scores become ``-inf``), or
            None. A row that sees no key gets zeros.
        softcap: scores become ``softcap * tanh(s / softcap)`` after the bias, before the
            mask.
        sinks: ``[heads]`` logits that join every row's softmax and read no value: the
            probabilities of a row then sum to less than one.
        value_term: the encoding's term added to the output from the probabilities
            (Shaw's relative values), or None.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]``; bias ``[(b,) h, q_len, k_len]``;
        allowed broadcastable to ``[b, h, q_len, k_len]`` -> ``[b, h, q_len, d]`` in the dtype
        of ``q``.
    """
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [b, h, k_len, d]
    dtype = math_dtype(q.dtype)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale  # [b, h, q_len, k_len]
    if bias is not None:
        scores = scores + bias.to(dtype)
    probs = probabilities(scores, allowed=allowed, softcap=softcap, sinks=sinks)
    out = read_values(probs, v)
    if value_term is not None:
        out = out + value_term(probs).to(dtype)
    return out.to(q.dtype)


def read_values(probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``probs @ v``, with the values' heads repeated to the probabilities' (grouped-query
    attention), in the probabilities' dtype. A value that is not finite is zeroed before the
    product, and a row that gives it weight becomes NaN, as it would with the value in; a
    row that gives it none (a masked slot) is untouched.

    Shapes:
        probs ``[b, h, q_len, k_len]``, v ``[b, kv_h, k_len, d]`` -> ``[b, h, q_len, d]``.
    """
    v = v.repeat_interleave(probs.shape[1] // v.shape[1], dim=1).to(probs.dtype)
    bad = ~torch.isfinite(v).all(dim=-1, keepdim=True)  # [b, h, k_len, 1]
    out = probs @ v.masked_fill(bad, 0.0)
    reached = (probs @ bad.to(probs.dtype)) > 0  # [b, h, q_len, 1]: weight on a non-finite value
    return out.masked_fill(reached, float("nan"))


def math(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`explicit_attention` with the context's dense mask, the call's
    softcap and sinks, the materialised bias where the plan has a table
    (:meth:`~posenc.attn.call.Call.bias_table`) and the encoding's value term where it adds
    to the values (Shaw's).

    Shapes:
        q ``[b, h, q_len, d]``, k ``[b, kv_h, k_len, d]``, v ``[b, kv_h, k_len, d_v]`` ->
        ``[b, h, q_len, d_v]``.
    """
    enc, options = call.encoding, call.options
    bias = call.bias_table() if plan.table is not None else None
    allowed = call.context.allowed(call.causal, options.pattern)
    mask, dead = (None, None) if allowed is None else allowed
    value_term = None
    if isinstance(enc, RelativeTables) and enc.adds_to_values:
        p = call.context.positions

        def value_term(probs: torch.Tensor, enc: RelativeTables = enc) -> torch.Tensor:
            return enc.value_term(probs, p.q, p.k)

    out = explicit_attention(
        call.q,
        call.k,
        call.v,
        call.scale,
        bias=bias,
        allowed=mask,
        softcap=options.softcap,
        sinks=options.sinks,
        value_term=value_term,
    )
    return zero_dead_rows(out, dead)
