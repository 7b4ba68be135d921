"""PoPE: polar coordinate positional embeddings (Gopalakrishnan et al. 2025, "Decoupling the
'What' and 'Where' With Polar Coordinate Positional Embeddings", arXiv:2509.10534).

RoPE rotates pairs of channels, so a pair's angle mixes what a token is (the pair's own
phase) with where it is. PoPE makes every channel ``c`` of a query or key a complex number
whose magnitude is the content and whose phase is the position alone:

    q̃_c = softplus(q_c) · e^{i(t·θ_c − δ_c)},    k̃_c = softplus(k_c) · e^{i·s·θ_c}

over ``d`` frequencies ``θ_c = base^(−c/d)`` (one per channel, not per pair), and the score
is ``Re Σ_c q̃_c · conj(k̃_c) = Σ_c softplus(q_c)·softplus(k_c)·cos((t − s)·θ_c − δ_c)``:
the content sets how much a channel counts, the distance alone its phase. ``δ_c`` is a
learned phase offset per head and channel (x-transformers adds it to the keys' phases;
on the queries' it gives the same scores and serves grouped key heads).
As real vectors, ``[μ·cos φ, μ·sin φ]``: q and k become twice as wide, and the score scale
stays ``1/√d`` of the input width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .dtypes import math_dtype

__all__ = ["pope_embed", "pope_inv_freq"]


def pope_inv_freq(
    head_dim: int, base: float, device: torch.device | str | None = None
) -> torch.Tensor:
    """PoPE's frequencies ``θ_c = base^(−c/d)``, one per channel (float64), made on
    ``device``.

    Shapes:
        -> ``[head_dim]``.
    """
    return base ** -(torch.arange(head_dim, dtype=torch.float64, device=device) / head_dim)


def pope_embed(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Channels as complex numbers of magnitude ``softplus(x)`` and the phases of ``cos``
    and ``sin``, written as real vectors ``[μ·cos φ, μ·sin φ]``; computed in float32
    (float64 for float64 inputs), returned in ``x``'s dtype.

    Shapes:
        x ``[batch, heads, seq, d]``, cos and sin broadcastable to it ->
        ``[batch, heads, seq, 2·d]``.
    """
    dtype = math_dtype(x.dtype, cos.dtype)
    magnitude = F.softplus(x.to(dtype))
    out = torch.cat((magnitude * cos.to(dtype), magnitude * sin.to(dtype)), dim=-1)
    return out.to(x.dtype)
