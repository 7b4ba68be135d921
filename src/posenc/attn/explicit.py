"""Attention with its softmax written out in float32: the path that runs everything.

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

import torch

from ..functional.dtypes import math_dtype

__all__ = ["explicit_attention", "finite", "finite_values", "probabilities"]


def finite(k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether every key and value is finite (:func:`finite_values` of each): else a
    masked slot's NaN would reach other queries through the fused kernels, which add the
    mask's ``-inf`` to a NaN score and multiply a zero probability by a NaN value."""
    return finite_values(k) and finite_values(v)


def finite_values(v: torch.Tensor) -> bool:
    """Whether every value is finite: their sum is (NaN and infinities reach it). One
    strided pass, no copy of a cache's slice (``isfinite(v).all()`` and ``aminmax`` cost
    15-50x more on the CPU, torch 2.13); a sum that overflows only sends the call to the
    explicit path, which is exact too. True while compiling, where the kernels' own
    behaviour is kept rather than a graph break, and on the meta device, which holds no
    values."""
    if torch.compiler.is_compiling() or v.device.type == "meta":
        return True
    return bool(torch.isfinite(v.sum(dtype=math_dtype(v.dtype))))


def probabilities(
    scores: torch.Tensor,
    *,
    allowed: torch.Tensor | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """The attention probabilities of scaled (and biased) ``scores``: soft-capped, masked,
    the softmax over the keys and the heads' sink logits, the sinks' column left out (a
    row then sums to ``1 - p_sink``); a row that sees no key gets zeros.

    Shapes:
        scores ``[b, h, q_len, k_len]``; allowed broadcastable to it; sinks ``[h]`` -> the
        shape of ``scores``, in its dtype.
    """
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is None:
        probs = scores.softmax(dim=-1)
    else:
        sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.cat((scores, sink), dim=-1).softmax(dim=-1)[..., :-1]
    return probs.nan_to_num(0.0)  # a row that sees no key: zeros, as from the kernels


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
    v = v.repeat_interleave(group, dim=1)
    dtype = math_dtype(q.dtype)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale  # [b, h, q_len, k_len]
    if bias is not None:
        scores = scores + bias.to(dtype)
    probs = probabilities(scores, allowed=allowed, softcap=softcap, sinks=sinks)
    v = v.to(dtype)
    bad = ~torch.isfinite(v).all(dim=-1, keepdim=True)  # [b, h, k_len, 1]
    out = probs @ v.masked_fill(bad, 0.0)
    reached = (probs @ bad.to(dtype)) > 0  # [b, h, q_len, 1]: weight on a non-finite value
    out = out.masked_fill(reached, float("nan"))
    if value_term is not None:
        out = out + value_term(probs).to(dtype)
    return out.to(q.dtype)
