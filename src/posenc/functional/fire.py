"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", ICLR 2024,
arXiv:2310.04418).

The bias of a query at ``i`` and a key at ``j`` is a small MLP of their distance,
log-compressed and normalised by the query position:

    b(i, j) = f_θ( ψ(i - j) / ψ(max(L, i)) ),     ψ(x) = log(c·x + 1)

``f_θ: R -> R^heads`` is ``Linear(1, hidden) -> ReLU -> Linear(hidden, heads)`` (hidden 32
in the paper), ``c`` and the threshold ``L`` are learned. The normaliser maps every visible
distance into ``[0, 1]`` whatever the query position (progressive interpolation); the
threshold ``L`` keeps it from over-amplifying distances at the first positions, so below
``L`` the bias depends on ``i - j`` only. It is the max, not the min: with the min the
normaliser would be fixed at ``ψ(L)`` past ``L`` and the inputs would leave ``[0, 1]``.

As the paper's code, ``ψ`` is ``log(|c·x| + 1)`` (defined for any sign of ``c``) and the
normaliser carries a small ``eps``. For ``i < j`` (bidirectional attention) the distance is
``|i - j|``, which is what that code computes.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "FIRE_EPS",
    "fire_input",
    "fire_input_bound",
    "fire_input_partials",
    "fire_mlp",
    "fire_mlp_matmul",
    "fire_psi",
]

#: added to the normaliser ψ(max(L, i)), as in the paper's code
FIRE_EPS = 1e-6


def fire_psi(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The log transform ``ψ(x) = log(|c·x| + 1)``, elementwise.

    Shapes:
        x, c: broadcastable -> their broadcast shape
    """
    return torch.log1p((c * x).abs())


def fire_input(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    eps: float = FIRE_EPS,
) -> torch.Tensor:
    """The MLP's input ``ψ(|i - j|) / (ψ(max(L, i)) + eps)``, elementwise.

    Args:
        q_pos: query positions ``i`` (floating, >= 0).
        k_pos: key positions ``j`` (floating, >= 0).
        c: the log-transform scale.
        threshold: ``L``, the smallest normalising position.
        eps: added to the normaliser.

    Shapes:
        q_pos, k_pos, c, threshold: broadcastable -> their broadcast shape
    """
    distance = (q_pos - k_pos).abs()
    normaliser = fire_psi(torch.maximum(q_pos, threshold), c) + eps
    return fire_psi(distance, c) / normaliser


def fire_input_partials(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    eps: float = FIRE_EPS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`fire_input` ``x = ψ(d) / (ψ(m) + eps)``, with ``d = |i - j|`` and
    ``m = max(L, i)``, and its partial derivatives with respect to ``c`` and the threshold
    ``L``, elementwise, as autograd takes them: ``∂ψ(u)/∂c = sign(c·u)·u / (1 + |c·u|)``,
    ``∂ψ(m)/∂m = sign(c·m)·c / (1 + |c·m|)``, and ``∂m/∂L`` is 1 where ``L > i``, 0 where
    ``L < i`` and ½ where they are equal (``torch.maximum`` splits a tie).

        ∂x/∂c = (∂ψ(d)/∂c - x·∂ψ(m)/∂c) / (ψ(m) + eps)
        ∂x/∂L = -x·∂ψ(m)/∂m·∂m/∂L / (ψ(m) + eps)

    Shapes:
        q_pos, k_pos, c, threshold: broadcastable -> ``(x, ∂x/∂c, ∂x/∂L)``, each of their
        broadcast shape
    """
    distance = (q_pos - k_pos).abs()
    m = torch.maximum(q_pos, threshold)
    cd, cm = c * distance, c * m
    normaliser = fire_psi(m, c) + eps
    x = fire_psi(distance, c) / normaliser
    d_c = (cd.sign() * distance / (1 + cd.abs()) - x * cm.sign() * m / (1 + cm.abs())) / normaliser
    m_threshold = (threshold > q_pos).to(x.dtype) + (threshold == q_pos).to(x.dtype) / 2
    d_threshold = -x * cm.sign() * c / (1 + cm.abs()) * m_threshold / normaliser
    return x, d_c, d_threshold


def fire_input_bound(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    eps: float = FIRE_EPS,
) -> torch.Tensor:
    """The largest :func:`fire_input` over every query and key: for each query the input
    grows with the distance, so its largest is at the farther of the two extreme keys.
    (The smallest is 0 or more: ``ψ >= 0`` and the normaliser ``> 0``.)

    Shapes:
        q_pos ``[..., q]``, k_pos ``[..., k]`` (floating, >= 0; the leading dimensions
        broadcastable), c, threshold 0-d -> 0-d
    """
    lo, hi = k_pos.amin(-1, keepdim=True), k_pos.amax(-1, keepdim=True)
    farthest = torch.maximum((q_pos - lo).abs(), (q_pos - hi).abs())
    return fire_input(q_pos, q_pos - farthest, c, threshold, eps).max()


def fire_mlp(
    x: torch.Tensor,
    head: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """Output ``head`` of ``f_θ(x) = W2·relu(w1·x + b1) + b2``, elementwise in ``x``.

    Written as a sum over the hidden units, unrolled in Python, so that it is a pointwise
    expression of ``x`` and ``head``: flex attention compiles a score_mod into its kernel
    only as pointwise code, and a reduction over a hidden dimension inside it fails to
    lower ("Buffers cannot be created while lowering a pointwise subgraph"). With
    broadcast inputs the hidden activations are computed once for every head. The math
    runs in ``x.dtype``.

    Args:
        x: the MLP input (:func:`fire_input`).
        head: integer head indices, broadcastable with ``x``.
        w1, b1: the first layer (``Linear(1, hidden)``: weight column and bias).
        w2, b2: the second layer (``Linear(hidden, heads)``).

    Shapes:
        x, head: broadcastable; w1, b1: ``[hidden]``; w2: ``[heads, hidden]``; b2:
        ``[heads]`` -> the broadcast shape of ``x`` and ``head``
    """
    dtype = x.dtype  # weights are indexed first, then cast: a pointwise cast per score
    out = b2[head].to(dtype)
    for unit in range(w1.shape[0]):
        hidden = torch.relu(w1[unit].to(dtype) * x + b1[unit].to(dtype))
        out = out + w2[head, unit].to(dtype) * hidden
    return out


def fire_mlp_matmul(
    x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
) -> torch.Tensor:
    """``f_θ(x)`` for every head as two batched matrix products over the hidden units,
    the scores in the columns so that the result comes out heads first with no transpose:
    :func:`fire_mlp` for all heads, rounded in another order. Math in ``x.dtype``.

    Shapes:
        x ``[..., q, k]``; w1, b1 ``[hidden]``; w2 ``[heads, hidden]``; b2 ``[heads]`` ->
        ``[..., heads, q, k]``
    """
    dtype = x.dtype
    w1, b1 = w1.to(dtype).unsqueeze(-1), b1.to(dtype).unsqueeze(-1)  # [hidden, 1]
    w2, b2 = w2.to(dtype), b2.to(dtype).unsqueeze(-1)
    flat = x.reshape(math.prod(x.shape[:-2]), 1, x.shape[-2] * x.shape[-1])  # [n, 1, q·k]
    hidden = torch.baddbmm(b1, w1.expand(flat.shape[0], -1, -1), flat).relu_()
    out = torch.baddbmm(b2, w2.expand(flat.shape[0], -1, -1), hidden)  # [n, heads, q·k]
    return out.view(*x.shape[:-2], w2.shape[0], *x.shape[-2:])
