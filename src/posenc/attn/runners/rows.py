"""The ``rows`` runner: a bias computed a block of query rows at a time on the CPU: the flash
kernel per block, forward and backward, with no ``[heads, L, L]`` tensor.

For a bias of the positions alone that is neither per distance (:mod:`.distance`) nor
linear (:mod:`.linear`), in posenc FIRE's MLP (Li et al. 2023, arXiv:2310.04418): each
block of ``B`` queries takes its ``[heads, B, keys]`` rows from the encoding (``rows(i0, i1,
n, masked)``), calls the kernel over the keys up to its last query (the causal part of the
diagonal tile as ``-inf`` in the rows, set by the encoding as it computes them), and keeps
only the output and the log-sum-exp. The backward (FlashAttention-2, Dao 2023,
arXiv:2307.08691, in :func:`~posenc.attn.kernels.flash_blocks.flash_backward`) recomputes
each block's rows with autograd on, and hands them the block's score gradients summed over
the batch: the tensors the rows are computed from get their gradient block by block, and
nothing of ``[batch, heads, L, L]`` is saved.

Those tensors are handed to ``rows`` as arguments (:meth:`~posenc.base.BiasEncoding.block_rows`
says which). A leaf (an encoding's parameter) is differentiated as it is; any other (what
an encoding derives from its parameters once per call: FIRE's pieces) is differentiated as a
detached copy, and autograd carries the summed gradient on to the parameters once, after
the last block: each block's graph holds only the block's own operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.function import once_differentiable

from ... import calibration
from ...base import BiasEncoding
from ...base.capabilities import invariant_below
from ...config import check_int
from ...functional.dtypes import math_dtype
from ..kernels.flash_blocks import (
    after_query,
    block_size,
    check_blockwise,
    flash_backward,
    flash_forward,
)
from .distance import by_distance, probe_length

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = [
    "BACKWARD_BLOCK",
    "BACKWARD_CANDIDATES",
    "PARTS",
    "Rows",
    "rows",
    "rows_attention",
    "tuned_backward_block",
]

#: queries per block of the backward: twice the other blockwise paths' (each block here
#: recomputes its rows and runs the encoding's backward, about 0.3 ms of calls whatever
#: its size; FIRE, L 1024, 8 heads of 64, 2-core AVX-512 EPYC, forward+backward 2.8x the floor
#: with 64, 2.3x with 128); it holds ``[batch, heads, BACKWARD_BLOCK, L]`` floats
BACKWARD_BLOCK = 128
#: the forward's kernel calls take a quarter of the queries each (within
#: :func:`~posenc.attn.kernels.flash_blocks.block_size`'s bounds): fewer, larger calls than the
#: other paths' eighth, as a call's fixed cost here outweighs the diagonal tile computed in
#: vain (FIRE at L 1024: 2.2x the floor in blocks of 128, 1.9x in blocks of 256)
PARTS = 4

#: ``rows(i0, i1, n, masked, *tensors)``: the bias of queries ``i0..i1-1`` over keys
#: ``0..n-1``, ``[heads, i1 - i0, n]`` (a strided view will do), ``-inf`` where ``masked``
#: (bool ``[i1 - i0, n]``, or None), computed from ``tensors`` (differentiably)
Rows = Callable[..., torch.Tensor]


def rows_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: Rows,
    params: Sequence[torch.Tensor],
    scale: float,
    causal: bool,
    block: int | None = None,
    q_offset: int = 0,
    backward_block: int = BACKWARD_BLOCK,
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + bias) v`` with the bias from ``rows``, a block of queries per
    kernel call, with a blockwise backward that reaches ``params`` through ``rows``.

    Args:
        q: ``[batch, heads, q_len, d]``; k, v: ``[batch, kv_heads, q_offset + q_len, d]``.
        rows: the bias of a block of queries (:data:`Rows`), in the query and key order of
            q and k.
        params: the tensors ``rows`` is given and computes from, which may need a
            gradient (the encoding's parameters, or what it derives from them per call).
        scale: the score scale (the bias is added after it).
        causal: mask keys after their query, by index.
        block: queries per kernel call; default
            :func:`~posenc.attn.kernels.flash_blocks.block_size` of :data:`PARTS`.
        q_offset: the queries are the keys from ``q_offset`` on (the rest of a call whose
            first queries went another way); ``rows`` and the causal mask take the keys'
            indices.
        backward_block: queries per block of the backward (:func:`tuned_backward_block`
            measures the best on the machine); the gradients are the same at any, to
            rounding.

    Returns:
        ``[batch, heads, q_len, d]`` in the dtype of ``q``.
    """
    n = q.shape[2]
    block = block_size(n, PARTS) if block is None else block
    k, v = check_blockwise(q, k, v, False, block)
    check_int("q_offset", q_offset, minimum=0)
    check_int("backward_block", backward_block)
    if k.shape[2] != q_offset + n:
        raise ValueError(
            f"rows_attention needs q_offset + q_len keys ({q_offset} + {n}), got {k.shape[2]}"
        )
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    args = (q, k, v, rows, float(scale), bool(causal), block, q_offset, backward_block)
    return _RowsFlash.apply(*args, *params)


#: where :class:`_RowsFlash`'s arguments after ``ctx`` reach ``params``
_PARAMS = 9


class _RowsFlash(torch.autograd.Function):
    """The blockwise kernel calls and their backward (see the module)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        rows: Rows,
        scale: float,
        causal: bool,
        block: int,
        q_offset: int,
        backward_block: int,
        *params: torch.Tensor,
    ) -> torch.Tensor:
        dtype = math_dtype(q.dtype)

        def mask(i0: int, i1: int, keys: int) -> torch.Tensor:
            i0, i1 = i0 + q_offset, i1 + q_offset  # the keys' indices
            masked = _unseen(i0, i1, keys, causal, q.device)
            return rows(i0, i1, keys, masked, *params).to(dtype)[None]

        out, lse = flash_forward(q, k, v, mask, scale, block=block, keys=_keys(k, causal, q_offset))
        ctx.save_for_backward(q, k, v, out, lse, *params)
        ctx.rows, ctx.scale, ctx.causal, ctx.q_offset = rows, scale, causal, q_offset
        ctx.backward_block = backward_block
        return out

    @staticmethod
    @once_differentiable  # a second derivative would need the backward's own graph
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse, *params = ctx.saved_tensors
        need = ctx.needs_input_grad
        # a derived tensor as a leaf of its own: each block's graph ends there
        params = [
            p if p.is_leaf or not needed else p.detach().requires_grad_()
            for p, needed in zip(params, need[_PARAMS:], strict=True)
        ]
        wanted = [p for p, needed in zip(params, need[_PARAMS:], strict=True) if needed]
        dtype = math_dtype(q.dtype)
        totals = [torch.zeros_like(p) for p in wanted]
        current: list[torch.Tensor] = []

        def bias_of(i0: int, i1: int, n: int) -> torch.Tensor:
            i0, i1 = i0 + ctx.q_offset, i1 + ctx.q_offset
            with torch.enable_grad():  # [h, blk, n], with its graph
                masked = _unseen(i0, i1, n, ctx.causal, q.device)
                block_bias = ctx.rows(i0, i1, n, masked, *params)
            current[:] = [block_bias]
            return block_bias.detach().to(dtype).unsqueeze(0)

        def bias_grad(i0: int, ds: torch.Tensor) -> None:
            (block_bias,) = current
            g = ds.view(-1, *block_bias.shape).sum(0).to(block_bias.dtype)  # over the batch
            for total, part in zip(totals, torch.autograd.grad(block_bias, wanted, g), strict=True):
                total += part

        gq, gk, gv = flash_backward(
            grads[0],
            q,
            k,
            v,
            bias_of,
            out,
            lse,
            ctx.scale,
            block=ctx.backward_block,
            keys=_keys(k, ctx.causal, ctx.q_offset),  # the rows hold the causal -inf
            bias_grad=bias_grad if wanted else None,
        )
        param_grads = iter(totals)
        return (
            gq.to(q.dtype) if need[0] else None,
            gk.to(k.dtype) if need[1] else None,
            gv.to(v.dtype) if need[2] else None,
            *(None,) * (_PARAMS - 3),  # rows, scale, causal, block, q_offset, backward_block
            *(next(param_grads) if needed else None for needed in need[_PARAMS:]),
        )


#: the backward's block sizes :func:`tuned_backward_block` tries (:data:`BACKWARD_BLOCK`
#: too)
BACKWARD_CANDIDATES = (64, 128, 256)
#: the longest length it measures at (FIRE's forward and backward there, 8 heads of 64, in
#: each of three blocks: about 4 s on the 2-core EPYC, once per machine, after FIRE's own
#: first compile; at 2048, 7 s); longer calls take its choice
BACKWARD_PROBE_MAX = 1024


def tuned_backward_block(encoding: BiasEncoding, q: torch.Tensor) -> int:
    """Queries per block of the backward of ``encoding``'s calls with ``q``'s heads, length
    and head size on this machine: the fastest of :data:`BACKWARD_CANDIDATES` for the
    forward and backward of a causal call of ``encoding`` itself at the probe length (the
    length's power of two, :func:`~posenc.attn.runners.distance.probe_length` up to
    :data:`BACKWARD_PROBE_MAX`), every gradient taken (its own rows' too, as training
    takes them, none written to its parameters), measured once per machine
    (:func:`posenc.calibration.choose`, kept on disk); :data:`BACKWARD_BLOCK` where nothing
    is measured (not the CPU, shorter than the probes, a traced or fake tensor).

    Each block recomputes its rows and runs the encoding's backward (a cost per block that
    only the encoding's own rows show) and holds ``[batch, heads, block, L]`` score
    gradients (what a core's L2 holds decides the rest). On the 2-core EPYC, a causal FIRE
    call's forward and backward (``posenc.attention``, 8 heads of 64, 2 threads) took 76 /
    72 / 97 ms in blocks of 64 / 128 / 256 at L 1024, and the probe keeps 128 there; a
    Xeon's 2 MiB of L2 may keep another. The gradients are the same at any block, to
    rounding.

    Shapes:
        q ``[batch, heads, L, head_dim]`` (``heads`` the encoding's)
    """
    h, d = q.shape[1], q.shape[3]
    probe = probe_length(q, BACKWARD_PROBE_MAX)
    if probe is None:
        return BACKWARD_BLOCK
    dtype = str(q.dtype).removeprefix("torch.")
    key = f"rows_backward_block/{type(encoding).__name__}/h{h}/L{probe}/d{d}/{dtype}"

    def measure(block: int) -> float:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(1, h, probe, d, generator=gen).to(q.dtype).requires_grad_(True)
        positions = torch.arange(probe)

        def step() -> object:
            with torch.enable_grad():  # a probe of its own, whatever mode its caller is in
                rows, tensors = encoding.block_rows(positions, positions)
                wanted = (x, *(t for t in tensors if t.requires_grad))
                out = rows_attention(x, x, x, rows, tensors, d**-0.5, True, backward_block=block)
                return torch.autograd.grad(out.sum(), wanted)

        return calibration.best_time(step)

    fits = [c for c in BACKWARD_CANDIDATES if c <= probe // 2]
    return calibration.choose(key, fits, BACKWARD_BLOCK, measure)


def _keys(k: torch.Tensor, causal: bool, q_offset: int) -> Callable[[int, int], int]:
    """How many keys (the first ones) the queries ``i0..i1-1`` see: those up to the last
    query's own (its index is ``q_offset + i1 - 1``), or all of them."""
    if causal:
        return lambda i0, i1: q_offset + i1
    return lambda i0, i1: k.shape[2]


def _unseen(i0: int, i1: int, n: int, causal: bool, device: torch.device) -> torch.Tensor | None:
    """The keys queries ``i0..i1-1`` may not see among the first ``n``: the causal part of
    the diagonal tile, or None."""
    return after_query(i0, i1, 0, n, device) if causal else None


def rows(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: a bias of the positions alone a block of query rows at a time; under a
    causal mask over the indices, the first queries whose bias is shift-invariant
    (:func:`~posenc.base.capabilities.invariant_below`: FIRE's before its threshold) see
    only each other, so they run on the distance blocks
    (:func:`~posenc.attn.runners.distance.by_distance`) and the rows take the rest."""
    q, k, v, encoding, scale, causal = (
        call.q,
        call.k,
        call.v,
        call.encoding,
        call.scale,
        call.causal,
    )
    assert encoding is not None, "the plan gives 'rows' to bias encodings"
    p, n = call.context.positions, q.shape[2]
    first = _invariant_queries(encoding, n) if causal and not p.explicit else 0
    if first == n:
        return by_distance(q, k, v, encoding, scale, causal)
    block_rows, tensors = encoding.block_rows(p.q, p.k)
    trains = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *tensors))
    backward = tuned_backward_block(encoding, q) if trains else BACKWARD_BLOCK
    if first == 0:
        return rows_attention(q, k, v, block_rows, tensors, scale, causal, None, 0, backward)
    # each part in the blocks the whole call would take: fewer kernel calls
    head_q, head_k, head_v = (t[:, :, :first] for t in (q, k, v))
    block = min(first, block_size(n))
    out = by_distance(head_q, head_k, head_v, encoding, scale, causal, block=block)
    rest = q[:, :, first:]
    block = min(n - first, block_size(n, PARTS))
    rest = rows_attention(rest, k, v, block_rows, tensors, scale, causal, block, first, backward)
    return torch.cat([out, rest], dim=2)


def _invariant_queries(encoding: BiasEncoding, n: int) -> int:
    """How many of the queries at positions ``0..n-1`` come before
    ``invariant_below(encoding)`` (strictly: at the bound FIRE's normaliser is a tie,
    whose gradient is shared with the query's position)."""
    bound = invariant_below(encoding)
    if not bound > 0:  # none (or a NaN threshold: the rows path's result is NaN as well)
        return 0
    return n if bound >= n else math.ceil(bound)
