"""FIRE's MLP as the piecewise-linear function it is: per score, a piece and one product
per head instead of a hidden layer (Li et al. 2023, "Functional Interpolation for Relative
Positions Improves Long Context Transformers", arXiv:2310.04418; the MLP is in
:mod:`posenc.functional.fire`).

``f_θ(x) = W2·relu(w1·x + b1) + b2`` of one input ``x`` is linear between the kinks
``t_k = -b1_k / w1_k`` of its hidden units: between two consecutive kinks the same units
are active (those with ``w1_k·x + b1_k > 0``), so with ``p`` the number of kinks below
``x``,

    f_θ(x)_h = slope[p, h]·x + offset[p, h],
    slope[p, h] = Σ_{k on p} W2[h, k]·w1_k,   offset[p, h] = b2_h + Σ_{k on p} W2[h, k]·b1_k

The same function, rounded in another order (a sum of the slopes, then one product, against
a sum of the products). Where ``x`` lies exactly on a kink both neighbouring pieces give
the same value (the MLP is continuous), and the gradient is that of either piece (ReLU's
is that of the piece below).

The gradient of the result with respect to ``slope``, ``offset`` and ``x`` is computed here
(:class:`_Pieces`): the sums of the score gradients (times ``x``) per piece and head, and
``Σ_h grad_h · slope[p, h]``; autograd carries them on to the MLP's weights through
:func:`fire_pieces` and to ``c`` and the threshold through the input. Nothing of
``[scores, hidden]`` is formed in either direction: the eager MLP writes and reads its
hidden layer, 32 floats a score, which is most of its cost.

On a CPU with a vector ISA (or CUDA) both directions run as kernels compiled by
``torch.compile`` (:mod:`posenc.functional.compiled`); elsewhere the same functions run
eagerly, where the per-score gathers cost more than the MLP's two matrix products (which
BLAS vectorises whatever ATen's ISA): :func:`pieces_pay` says which to use.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .compiled import CompiledFunction

__all__ = [
    "COMPILE_MIN_SCORES",
    "evaluate_pieces",
    "fire_mlp_pieces",
    "fire_pieces",
    "pieces_pay",
]

#: the fewest scores a call takes to the compiled kernels: below, a compiled call's fixed
#: cost (about 0.45 ms with the pieces' small ops) outweighs what it saves (2-core AVX2,
#: 8 heads, 32 units: 0.46 ms against the matrix products' 0.21 at 4,096 scores, 0.44
#: against 0.54 at 16,384, 0.64 against 2.5 at 65,536)
COMPILE_MIN_SCORES = 1 << 14


def fire_pieces(
    w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pieces of ``f_θ(x) = W2·relu(w1·x + b1) + b2``: its kinks in ascending order and
    each piece's slope and offset (differentiable in the weights; the kinks are not, as
    the function is continuous across them).

    A unit with ``w1_k = 0`` has no kink (``+inf``, last): it adds ``relu(b1_k)`` to
    every offset.

    Args:
        w1, b1: the first layer (``Linear(1, hidden)``: weight column and bias).
        w2, b2: the second layer (``Linear(hidden, heads)``).

    Shapes:
        w1, b1 ``[hidden]``; w2 ``[heads, hidden]``; b2 ``[heads]`` -> kinks ``[hidden]``,
        slope and offset ``[hidden + 1, heads]`` (piece ``p``: ``p`` kinks below ``x``)

    Example:
        >>> # relu(2x - 1) + relu(2 - x): kinks 0.5 and 2
        >>> w1, b1 = torch.tensor([2.0, -1.0]), torch.tensor([-1.0, 2.0])
        >>> kinks, slope, offset = fire_pieces(w1, b1, torch.ones(1, 2), torch.zeros(1))
        >>> kinks.tolist(), slope[:, 0].tolist(), offset[:, 0].tolist()
        ([0.5, 2.0], [-1.0, 1.0, 2.0], [2.0, 1.0, -1.0])
    """
    hidden = w1.shape[0]
    flat = w1 == 0
    with torch.no_grad():
        kinks = torch.where(flat, torch.inf, -b1 / torch.where(flat, 1.0, w1))
        kinks, order = kinks.sort()
        rank = torch.empty_like(order)
        rank[order] = torch.arange(hidden, device=order.device)
        pieces = torch.arange(hidden + 1, device=order.device)
        above = pieces[:, None] > rank  # [hidden + 1, hidden]: x above unit k's kink
        active = torch.where(flat, b1 > 0, torch.where(w1 > 0, above, ~above))
    on = active.to(w1.dtype)
    slope = on @ (w2 * w1).T  # [hidden + 1, heads]
    offset = on @ (w2 * b1).T + b2
    return kinks, slope, offset


def fire_mlp_pieces(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    masked: torch.Tensor | None = None,
) -> torch.Tensor:
    """``f_θ(x)`` for every head, as :func:`~posenc.functional.fire.fire_mlp` gives it per
    head, by pieces (see the module); ``-inf`` where ``masked``. Differentiable once in
    ``x`` and the weights. The math runs in ``x.dtype``.

    Args:
        x: the MLP's inputs (:func:`~posenc.functional.fire.fire_input`).
        w1, b1, w2, b2: the MLP (see :func:`fire_pieces`).
        masked: True where the result is ``-inf`` (a key its query may not see), or None.

    Shapes:
        x ``[...]``, masked broadcastable to it -> ``[..., heads]`` (heads last)

    Example:
        >>> from posenc.functional.fire import fire_mlp
        >>> w1, b1, w2, b2 = torch.randn(8), torch.randn(8), torch.randn(3, 8), torch.randn(3)
        >>> x = torch.rand(5, 7)
        >>> per_head = [fire_mlp(x, torch.tensor(h), w1, b1, w2, b2) for h in range(3)]
        >>> torch.allclose(fire_mlp_pieces(x, w1, b1, w2, b2), torch.stack(per_head, -1), atol=1e-5)
        True
    """
    return evaluate_pieces(x, *fire_pieces(*(t.to(x.dtype) for t in (w1, b1, w2, b2))), masked)


def evaluate_pieces(
    x: torch.Tensor,
    kinks: torch.Tensor,
    slope: torch.Tensor,
    offset: torch.Tensor,
    masked: torch.Tensor | None = None,
) -> torch.Tensor:
    """``slope[p]·x + offset[p]`` for every head, ``p`` the number of ``kinks`` below
    ``x``, ``-inf`` where ``masked``: :func:`fire_mlp_pieces` from the pieces
    :func:`fire_pieces` gives (computed once for many calls). Differentiable once in ``x``,
    ``slope`` and ``offset``.

    Shapes:
        x ``[...]``, masked broadcastable to it; kinks ``[hidden]``; slope, offset
        ``[hidden + 1, heads]`` -> ``[..., heads]``
    """
    if masked is not None:
        masked = masked.expand(x.shape)
    return _Pieces.apply(x, kinks, slope, offset, masked)


def _piece(x: torch.Tensor, kinks: torch.Tensor) -> torch.Tensor:
    """The piece of every ``x``: how many kinks lie below it (int32), as one comparison
    per kink (unrolled: compiled, it is a pointwise loop with no search)."""
    piece = (x > kinks[0]).int()
    for k in range(1, kinks.shape[0]):
        piece = piece + (x > kinks[k]).int()
    return piece


def _evaluate(
    x: torch.Tensor,
    kinks: torch.Tensor,
    slope: torch.Tensor,
    offset: torch.Tensor,
    masked: torch.Tensor | None,
) -> torch.Tensor:
    """``slope[p]·x + offset[p]`` per head, ``-inf`` where masked: ``[..., heads]``."""
    p = _piece(x, kinks)
    out = slope[p] * x[..., None] + offset[p]
    return out if masked is None else out.masked_fill(masked[..., None], float("-inf"))


def _evaluate_backward(
    x: torch.Tensor,
    kinks: torch.Tensor,
    slope: torch.Tensor,
    grad: torch.Tensor,
    masked: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_evaluate` with respect to ``x``, ``slope`` and ``offset``:
    ``Σ_h grad_h·slope[p, h]``, and the sums per piece of ``grad·x`` and ``grad`` (a
    product with the pieces' one-hot matrix: a matrix product, where a scatter-add of
    every score would be scalar code)."""
    if masked is not None:
        grad = grad.masked_fill(masked[..., None], 0.0)
    p = _piece(x, kinks)
    grad_x = (grad * slope[p]).sum(-1)
    pieces = torch.arange(slope.shape[0], dtype=p.dtype, device=p.device)
    one_hot = (p[..., None] == pieces).to(x.dtype).reshape(-1, slope.shape[0])
    both = torch.cat([grad * x[..., None], grad], -1).reshape(-1, 2 * slope.shape[1])
    sums = one_hot.T @ both  # [pieces, 2·heads]
    return grad_x, sums[:, : slope.shape[1]], sums[:, slope.shape[1] :]


_FORWARD = CompiledFunction(_evaluate, "FIRE")
_BACKWARD = CompiledFunction(_evaluate_backward, "FIRE backward")


def pieces_pay(scores: int, device: torch.device) -> bool:
    """Whether :func:`fire_mlp_pieces` of ``scores`` inputs on ``device`` runs compiled
    (enough scores, a device inductor vectorises): then it is the fastest form of the MLP;
    otherwise the MLP's matrix products (:func:`~posenc.functional.fire.fire_mlp_matmul`)
    are, for many scores (measured: ``docs/design-notes.md``, "FIRE by blocks of rows")."""
    return _compiles(_FORWARD, scores, device)


def _compiles(kernel: CompiledFunction, scores: int, device: torch.device) -> bool:
    """Whether ``kernel`` runs compiled for ``scores`` inputs on ``device``."""
    return scores >= COMPILE_MIN_SCORES and kernel.usable(device)


def _run(kernel: CompiledFunction, x: torch.Tensor, *args: torch.Tensor | None):
    """``kernel(x, ...)`` compiled where usable and worth it, else its eager function."""
    run = kernel if _compiles(kernel, x.numel(), x.device) else kernel.fn
    return run(x, *args)


class _Pieces(torch.autograd.Function):
    """:func:`_evaluate` with :func:`_evaluate_backward` as its gradient."""

    @staticmethod
    def forward(ctx, x, kinks, slope, offset, masked):
        ctx.save_for_backward(x, kinks, slope, masked)
        return _run(_FORWARD, x, kinks, slope, offset, masked)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, kinks, slope, masked = ctx.saved_tensors
        grad_x, grad_slope, grad_offset = _run(_BACKWARD, x, kinks, slope, grad, masked)
        need = ctx.needs_input_grad
        return (
            grad_x if need[0] else None,
            None,
            grad_slope if need[2] else None,
            grad_offset if need[3] else None,
            None,
        )
