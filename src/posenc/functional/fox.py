"""Forgetting attention (FoX: Lin, Nikishin, He, Courville 2025, "Forgetting Transformer:
Softmax Attention with a Forget Gate", ICLR, arXiv:2503.02130) as pure functions.

Every head ``h`` has a scalar forget gate per token, ``f_t = σ(w_h · x_t + b_h)``, from the
layer's input ``x``. A query ``i`` weighs the key ``j <= i`` by the gates of the tokens
after it:

    s_ij = q_i · k_j · scale + Σ_{l=j+1..i} log f_l = q_i · k_j · scale + c_i − c_j

with the *forget clock* ``c_t = Σ_{l<=t} log f_l`` (non-increasing). With constant gates
``f`` this is ALiBi with the slope ``−log f``: FoX is a data-dependent ALiBi, and, like
ALiBi, it needs no other position encoding. Softmax drops the row constant ``c_i``, so
inside causal attention the bias is the per-key term ``−c_j`` (:mod:`posenc.attn.forget`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .dtypes import math_dtype

__all__ = ["forget_bias", "forget_clock", "forget_log_gates"]


def forget_log_gates(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The log forget gates ``log f_t = log σ(w_h · x_t + b_h)`` of every head, in float32
    (float64 for float64 inputs): ``logsigmoid`` keeps them exact where ``f`` rounds to 1.

    Shapes:
        x ``[batch, seq, dim]``, weight ``[heads, dim]``, bias ``[heads]`` ->
        ``[batch, heads, seq]``, every value ``<= 0``.
    """
    dtype = math_dtype(x.dtype, weight.dtype)
    logits = F.linear(x.to(dtype), weight.to(dtype), bias.to(dtype))  # [b, seq, heads]
    return F.logsigmoid(logits).transpose(-1, -2)


def forget_clock(log_gates: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
    """The forget clock ``c_t = start + Σ_{l<=t} log f_l`` of every head: the running sum
    of the log gates, continued from ``start`` (the clock of the last cached token) when
    decoding.

    Shapes:
        log_gates ``[batch, heads, seq]``, start ``[batch, heads, 1]`` or None ->
        ``[batch, heads, seq]``.
    """
    clock = log_gates.cumsum(dim=-1)
    return clock if start is None else clock + start


def forget_bias(q_clock: torch.Tensor, k_clock: torch.Tensor) -> torch.Tensor:
    """The forget bias ``c_i − c_j = Σ_{l=j+1..i} log f_l`` of every query ``i`` and key
    ``j``, materialised (the reference; attention adds ``−c_j`` instead). It is the bias of
    keys at or before their query; a causal mask hides the others.

    Shapes:
        q_clock ``[batch, heads, q_len]``, k_clock ``[batch, heads, k_len]`` ->
        ``[batch, heads, q_len, k_len]``.
    """
    return q_clock.unsqueeze(-1) - k_clock.unsqueeze(-2)
