"""FIRE's bias for a block of queries in one kernel each way: the MLP's input from the
positions, the MLP by its pieces, the result heads first (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers",
arXiv:2310.04418; the input is :func:`~posenc.functional.fire.fire_input`, the pieces
:mod:`posenc.functional.fire`).

The forward computes each score's input and piece and writes ``[heads, q, k]``, the layout
attention kernels read (each head's scores contiguous; written heads last, the CPU flash
kernel copies them into this layout itself, and the copy cost as much as the MLP). The
backward takes the gradient of that result and gives those of ``c``, the threshold and the
pieces' slopes and offsets at once: the sums per piece
(:func:`~posenc.functional.fire.pieces_backward`) and ``Σ grad_x·∂x/∂c``, ``Σ grad_x·∂x/∂L``
with the input and its partial derivatives written out
(:func:`~posenc.functional.fire.fire_input_partials`). Nothing per score is kept between the
two: the input is recomputed from the positions.

On a CPU with a vector ISA (or CUDA) both directions run as kernels compiled by
``torch.compile`` (:mod:`posenc.functional.compiled`); elsewhere the same functions run
eagerly, where the per-score selects cost more than the MLP's two matrix products (which
BLAS vectorises whatever ATen's ISA): :func:`pieces_pay` says which to use.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .compiled import CompiledFunction
from .fire import evaluate_pieces, fire_input, fire_input_partials, pieces_backward

__all__ = ["COMPILE_MIN_SCORES", "fire_rows", "pieces_pay"]

#: the fewest scores a call takes to the compiled kernels: below, a compiled call's fixed
#: cost (about 0.45 ms with the pieces' small ops) outweighs what it saves (2-core AVX2,
#: 8 heads, 32 units: 0.46 ms against the matrix products' 0.21 at 4,096 scores, 0.44
#: against 0.54 at 16,384, 0.64 against 2.5 at 65,536)
COMPILE_MIN_SCORES = 1 << 14


def fire_rows(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    kinks: torch.Tensor,
    slope: torch.Tensor,
    offset: torch.Tensor,
    masked: torch.Tensor | None = None,
) -> torch.Tensor:
    """FIRE's bias ``f_θ(ψ(|i - j|) / ψ(max(L, i)))`` of queries at ``q_pos`` and keys at
    ``k_pos``, heads first, ``-inf`` where ``masked``; differentiable once in ``c``,
    ``threshold``, ``slope`` and ``offset`` (not in the positions).

    Args:
        q_pos: query positions, ``[q, 1]`` or ``[batch, q, 1]`` (floating).
        k_pos: key positions, ``[1, k]`` or ``[batch, 1, k]``.
        c, threshold: FIRE's log-transform scale and threshold ``L`` (0-d).
        kinks, slope, offset: the MLP's pieces
            (:func:`~posenc.functional.fire.fire_pieces`, or
            :func:`~posenc.functional.fire.pieces_within`).
        masked: True where a query may not see a key (``[q, k]``), or None.

    Shapes:
        -> ``[heads, q, k]`` or ``[batch, heads, q, k]`` (a view of a heads-first tensor)

    Example:
        >>> from posenc.functional.fire import fire_input, fire_mlp
        >>> from posenc.functional.fire import fire_pieces
        >>> w1, b1, w2, b2 = torch.randn(8), torch.randn(8), torch.randn(3, 8), torch.randn(3)
        >>> q, k, c, L = torch.arange(5.0)[:, None], torch.arange(5.0)[None], 0.1, 2.0
        >>> got = fire_rows(q, k, torch.tensor(c), torch.tensor(L), *fire_pieces(w1, b1, w2, b2))
        >>> x = fire_input(q, k, torch.tensor(c), torch.tensor(L))
        >>> want = fire_mlp(x, torch.arange(3)[:, None, None], w1, b1, w2, b2)
        >>> torch.allclose(got, want, atol=1e-5)
        True
    """
    args = (q_pos, k_pos, c, threshold, kinks, slope, offset, masked)
    return _Rows.apply(*args).movedim(0, -3)


def _rows(q_pos, k_pos, c, threshold, kinks, slope, offset, masked):
    """The bias, heads first: ``[heads, (batch,) q, k]``."""
    x = fire_input(q_pos, k_pos, c, threshold)
    return evaluate_pieces(x, kinks, slope, offset, masked)


def _rows_backward(q_pos, k_pos, c, threshold, kinks, slope, grad, masked):
    """The gradients of :func:`_rows` with respect to ``c``, ``threshold``, ``slope`` and
    ``offset`` for the gradient ``grad`` of its result (heads first)."""
    x, d_c, d_threshold = fire_input_partials(q_pos, k_pos, c, threshold)
    grad_x, grad_slope, grad_offset = pieces_backward(x, kinks, slope, grad, masked)
    return (grad_x * d_c).sum(), (grad_x * d_threshold).sum(), grad_slope, grad_offset


_FORWARD = CompiledFunction(_rows, "FIRE")
_BACKWARD = CompiledFunction(_rows_backward, "FIRE backward")


def pieces_pay(scores: int, device: torch.device) -> bool:
    """Whether :func:`fire_rows` of ``scores`` scores on ``device`` runs compiled (enough
    scores, a device inductor vectorises): then it is the fastest form of the MLP;
    otherwise the MLP's matrix products (:func:`~posenc.functional.fire.fire_mlp_matmul`)
    are, for many scores (measured: ``docs/design-notes.md``, "FIRE by blocks of rows")."""
    return _compiles(_FORWARD, scores, device)


def _compiles(kernel: CompiledFunction, scores: int, device: torch.device) -> bool:
    """Whether ``kernel`` runs compiled for ``scores`` scores on ``device``."""
    return scores >= COMPILE_MIN_SCORES and kernel.usable(device)


def _run(kernel: CompiledFunction, q_pos: torch.Tensor, k_pos: torch.Tensor, *args):
    """``kernel(q_pos, k_pos, *args)`` compiled where usable and worth it (enough scores),
    else its eager function."""
    scores = torch.broadcast_shapes(q_pos.shape, k_pos.shape).numel()
    compiled = _compiles(kernel, scores, q_pos.device)
    return (kernel if compiled else kernel.fn)(q_pos, k_pos, *args)


class _Rows(torch.autograd.Function):
    """:func:`_rows` with :func:`_rows_backward` as its gradient."""

    @staticmethod
    def forward(ctx, q_pos, k_pos, c, threshold, kinks, slope, offset, masked):
        ctx.save_for_backward(q_pos, k_pos, c, threshold, kinks, slope, masked)
        return _run(_FORWARD, q_pos, k_pos, c, threshold, kinks, slope, offset, masked)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q_pos, k_pos, c, threshold, kinks, slope, masked = ctx.saved_tensors
        grads = _run(_BACKWARD, q_pos, k_pos, c, threshold, kinks, slope, grad, masked)
        need = ctx.needs_input_grad[2:4] + ctx.needs_input_grad[5:7]
        grad_c, grad_threshold, grad_slope, grad_offset = (
            g if needed else None for g, needed in zip(grads, need, strict=True)
        )
        return None, None, grad_c, grad_threshold, None, grad_slope, grad_offset, None
