"""The ``distance`` runner: a shift-invariant bias on the CPU from its ``2L - 1`` distance values:
the flash kernel a block of queries at a time, forward and backward, with no
``[heads, L, L]`` tensor.

A bias that depends on ``k_pos - q_pos`` only (ALiBi, Press et al. 2022, arXiv:2108.12409;
T5's buckets, Raffel et al. 2020, arXiv:1910.10683; KERPLE, Chi et al. 2022,
arXiv:2205.09921) takes one value per distance. Over positions ``0..L-1`` write
``w[x] = f(x - (L - 1))`` for ``x = 0..2L-2`` (:func:`distance_values`). The row of query
``i`` is ``w[L-1-i : 2L-1-i]``: in *reverse* query order the rows of the ``[heads, L, L]``
table are a sliding view of ``w`` (``unfold``, row stride 1, nothing copied), which the CPU
flash kernel reads through its strides. So the queries are reversed once, and each block
of ``B`` queries is one kernel call over its rows of that view and only the keys up to its
last query; under a causal mask ``w`` carries ``-inf`` for the distances above zero, so the
one tile the kernel computes in vain is each block's diagonal (``B / L`` of the work).

The backward (FlashAttention-2, Dao 2023, arXiv:2307.08691, Algorithm 2, in
:func:`~posenc.attn.kernels.flash_blocks.flash_backward`) runs in the same reversed order, and the
gradient of ``w`` sums each anti-diagonal of the score gradients, read as the columns of a
skewed view (:class:`DistanceGrad`). Measured against plain causal SDPA: docs/design-notes.md,
"Shift-invariant biases from their distances". The block of queries per call is measured
on the machine (:func:`tuned_block`), and so is the backward's (:func:`tuned_backward_block`):
the fastest differs between CPUs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.function import once_differentiable

from ... import calibration
from ...base import BiasEncoding, LinearSlopes
from ...functional.dtypes import math_dtype
from ..kernels.flash_blocks import BLOCK as BACKWARD_BLOCK
from ..kernels.flash_blocks import block_size, check_blockwise, flash_backward, flash_forward

if TYPE_CHECKING:
    from ..call import Call
    from ..planner import Plan

__all__ = [
    "FLUSH_MARGIN",
    "by_distance",
    "distance",
    "distance_attention",
    "distance_values",
    "linear_spread",
    "negligible",
]


def distance_values(
    encoding: BiasEncoding, n: int, causal: bool, device: torch.device | str | None = None
) -> torch.Tensor:
    """The ``2n - 1`` values of a shift-invariant bias over positions ``0..n-1``:
    ``w[:, x] = bias(query n - 1, key x)``, that is ``f(x - (n - 1))``, and ``-inf`` for
    the keys after their query (``x > n - 1``) when ``causal``
    (:meth:`~posenc.base.BiasEncoding.distance_values`, which keeps them while the encoding
    is unchanged: read them, do not write to them). Differentiable.

    Shapes:
        -> ``[heads, 2n - 1]``

    Example:
        >>> import posenc
        >>> t5 = posenc.create("t5", n_heads=2)
        >>> w = distance_values(t5, 5, causal=False)
        >>> rows = w.unfold(-1, 5, 1).flip(-2)  # [h, 5, 5], row i = query i
        >>> torch.equal(rows, t5.bias(torch.arange(5), torch.arange(5)))
        True
    """
    return encoding.distance_values(n, causal, device)


def distance_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    values: torch.Tensor,
    scale: float,
    causal: bool,
    block: int | None = None,
    *,
    spread: float | None = None,
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + bias) v`` for the shift-invariant bias of ``values`` over
    positions ``0..L-1``, a block of queries per kernel call, with a blockwise backward.

    Args:
        q: ``[batch, heads, L, d]``; k, v: ``[batch, kv_heads, L, d]`` (grouped-query heads
            allowed).
        values: ``[heads, 2L - 1]`` from :func:`distance_values` (``-inf`` past distance 0
            when causal); its gradient is the sum of the score gradients of each distance.
        scale: the score scale (the bias is added after it).
        causal: each block sees the keys up to its last query only (the ``-inf`` values
            mask the rest).
        block: queries per kernel call; default :func:`tuned_block`.
        spread: how far below the value at distance 0 any value may lie, where known
            without reading them (:func:`linear_spread`), else None; a spread well short of
            what :func:`negligible` flushes skips it (it would flush nothing).

    Returns:
        ``[batch, heads, L, d]`` in the dtype of ``q``; the bias and the backward are in
        float32 (float64 for float64 inputs).
    """
    n = q.shape[2]
    block = tuned_block(q) if block is None else block
    k, v = check_blockwise(q, k, v, causal, block)
    if k.shape[2] != n or values.shape != (q.shape[1], 2 * n - 1):
        raise ValueError(
            f"distance_attention needs L queries and keys and [heads, 2L - 1] values, got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, values {tuple(values.shape)}"
        )
    k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (k, v))
    values = values.to(math_dtype(q.dtype))
    if spread is None or not spread < FLUSH_MARGIN * -_log_tiny(values.dtype):
        values = negligible(values, q, k, scale)
    values = values.contiguous()  # the kernel reads rows of stride 1
    args = (q, k, v, values, float(scale), bool(causal), block)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, values)):
        return _DistanceFlash.apply(*args, tuned_backward_block(q))
    return _forward(*args)[0]  # no backward: no autograd node to build


#: the block sizes :func:`tuned_block` tries
CANDIDATES = (64, 128, 256, 512)
#: the lengths it measures at: the power of two from the queries', within these (shorter
#: calls take the default: a block or a few; longer ones the longest's choice, whose
#: timing already takes about a second)
PROBE_MIN, PROBE_MAX = 512, 4096
#: the heads of the measured call (its batch is 1): a model's few, where a block must fill
#: the cores
PROBE_HEADS = 8


def tuned_block(q: torch.Tensor) -> int:
    """Queries per kernel call for ``q``'s length and head size on this machine: the fastest
    of :data:`CANDIDATES` for a causal call of a flat bias at the probe length, measured once
    per machine (:func:`posenc.calibration.choose`, kept on disk), else the default
    :func:`~posenc.attn.kernels.flash_blocks.block_size`. The call's result is the same
    whatever the block, to rounding: each row's softmax runs over its own keys.

    Shapes:
        q ``[batch, heads, L, head_dim]``
    """
    return _calibrated(q, "distance_block", CANDIDATES, PROBE_MAX, block_size, _time_forward)


def _time_forward(x: torch.Tensor, values: torch.Tensor, block: int) -> float:
    """The forward of the probe call in blocks of ``block`` queries, in seconds."""
    return calibration.best_time(
        lambda: _forward(x, x, x, values, x.shape[-1] ** -0.5, True, block)
    )


#: the backward's block sizes :func:`tuned_backward_block` tries
BACKWARD_CANDIDATES = (32, 64, 128, 256)
#: the longest length it measures at (5.5 s at 2048 on the 2-core EPYC, once per machine;
#: longer calls take that length's choice)
BACKWARD_PROBE_MAX = 2048


def tuned_backward_block(q: torch.Tensor) -> int:
    """Queries per block of the backward for ``q``'s length and head size on this machine,
    as :func:`tuned_block` measures the forward's: the fastest of
    :data:`BACKWARD_CANDIDATES` for the forward and backward of the same probe call (every
    gradient, the distance values' included, as training computes them; the forward in the
    default block), else the backward's default block. A block holds ``[batch, heads,
    block, L]`` floats of score gradients: the size that fits a core's L2 differs between
    CPUs (1 MiB on the AMD EPYC this was built on, 2 MiB on a Sapphire Rapids Xeon). The
    gradients are the same whatever the block, to rounding.

    Shapes:
        q ``[batch, heads, L, head_dim]``
    """
    return _calibrated(
        q,
        "distance_backward_block",
        BACKWARD_CANDIDATES,
        BACKWARD_PROBE_MAX,
        lambda n: BACKWARD_BLOCK,
        _time_backward,
    )


def _time_backward(x: torch.Tensor, values: torch.Tensor, block: int) -> float:
    """The forward and backward of the probe call (every gradient) with the backward in
    blocks of ``block`` queries, in seconds."""
    x, values = x.requires_grad_(True), values.requires_grad_(True)
    args = (x, x, x, values, x.shape[-1] ** -0.5, True, block_size(x.shape[2]), block)

    def step() -> object:
        with torch.enable_grad():  # a probe of its own, whatever mode its caller is in
            out = _DistanceFlash.apply(*args)
            return torch.autograd.grad(out.sum(), (x, values))

    return calibration.best_time(step)


def probe_length(q: torch.Tensor, probe_max: int) -> int | None:
    """The length a calibration of ``q``'s calls measures at: the power of two from ``q``'s
    length, :data:`PROBE_MIN` to ``probe_max``; None where nothing is measured (not the
    CPU, shorter than the probes, a traced or fake tensor: export, FakeTensorMode).

    Shapes:
        q ``[batch, heads, L, head_dim]``
    """
    n = q.shape[2]
    if q.device.type != "cpu" or n < PROBE_MIN or type(q) is not torch.Tensor:
        return None
    return min(probe_max, 1 << (n - 1).bit_length())


def _calibrated(
    q: torch.Tensor,
    name: str,
    candidates: tuple[int, ...],
    probe_max: int,
    default: Callable[[int], int],
    time_block: Callable[[torch.Tensor, torch.Tensor, int], float],
) -> int:
    """The block :func:`posenc.calibration.choose` keeps for ``name`` at ``q``'s length as a
    power of two (:data:`PROBE_MIN` to ``probe_max``), head size and dtype, each of
    ``candidates`` (up to half the probe) timed by ``time_block(x, values, block)`` on a
    causal call of a flat bias (``x`` its q, k and v, :data:`PROBE_HEADS` heads);
    ``default(length)`` where nothing is measured: not the CPU, shorter than the probes, a
    traced or fake tensor (export, FakeTensorMode: no time to measure)."""
    n, d = q.shape[2], q.shape[3]
    probe = probe_length(q, probe_max)
    if probe is None:
        return default(n)
    key = f"{name}/L{probe}/d{d}/{str(q.dtype).removeprefix('torch.')}"

    def measure(block: int) -> float:
        x = torch.randn(1, PROBE_HEADS, probe, d, generator=torch.Generator().manual_seed(0))
        values = torch.zeros(PROBE_HEADS, 2 * probe - 1, dtype=math_dtype(q.dtype))
        values[:, probe:] = float("-inf")  # causal: no key after its query
        return time_block(x.to(q.dtype), values, block)

    fits = [c for c in candidates if c <= probe // 2]
    return calibration.choose(key, fits, default(probe), measure)


def negligible(
    values: torch.Tensor, q: torch.Tensor, k: torch.Tensor, scale: float
) -> torch.Tensor:
    """``values`` with ``-inf`` at the distances whose weight is below the smallest normal
    float in every row, whatever q and k hold: flushed to zero, as the backward flushes what
    ``exp()`` would make subnormal, before the kernel's own ``exp()`` (whose scalar path
    slows down on subnormals: a steep ALiBi head at L 8192).

    A row's largest score is at least that of its own key (distance 0, which every query
    sees), and ``scale·q·k`` differs between two keys by at most
    ``2·scale·max|q|·max|k|`` (per head); a distance whose value is below the value at 0 by
    more than that plus ``-log(tiny)`` weighs less than ``tiny`` in every row.

    Shapes:
        values ``[h, 2L - 1]``, q ``[b, h, L, d]``, k ``[b, h, L, d]`` (heads repeated) ->
        ``[h, 2L - 1]``
    """
    if torch.is_grad_enabled():
        with torch.no_grad():
            far = _far(values, q, k, scale)
    else:  # no grad mode to enter and leave
        far = _far(values, q, k, scale)
    return values.masked_fill(far, float("-inf"))


def _far(values: torch.Tensor, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Where :func:`negligible` flushes ``values``: ``[h, 2L - 1]`` bool."""
    n = q.shape[2]
    norms = [torch.linalg.vector_norm(t, dim=-1, dtype=values.dtype) for t in (q, k)]
    q_max, k_max = (t.amax(dim=(0, 2)) for t in norms)  # [h]
    bound = 2.01 * scale * q_max * k_max  # a hundredth more: the norms' own rounding
    floor = values[:, n - 1 : n] + _log_tiny(values.dtype) - bound[:, None]
    return values < floor  # NaN or inf in q, k: an inf or NaN bound flushes nothing


#: :func:`distance_attention` skips :func:`negligible` for values that spread below their
#: value at distance 0 by less than this fraction of ``-log(tiny)`` (the rest covers their
#: rounding): none of them can be flushed
FLUSH_MARGIN = 0.5


def linear_spread(encoding: BiasEncoding, n: int, causal: bool) -> float | None:
    """How far below its value at distance 0 a bias linear in the distance
    (:class:`~posenc.base.LinearSlopes`: ``-m_h (i - j)``) lies over ``n`` positions:
    ``max |m_h| · (n - 1)``, from the slopes known on the host; None for other biases (or
    where the slopes do not apply)."""
    slopes = encoding.linear_slopes(causal) if isinstance(encoding, LinearSlopes) else None
    if slopes is None:
        return None
    return max(map(abs, slopes), default=0.0) * (n - 1)


@functools.cache
def _log_tiny(dtype: torch.dtype) -> float:
    """``log`` of the smallest normal number of ``dtype``."""
    return math.log(torch.finfo(dtype).tiny)


def _forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    values: torch.Tensor,
    scale: float,
    causal: bool,
    block: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The blockwise kernel calls over reversed queries: ``(out, q_r, out_r, lse_r)``, the
    output and what the backward reads (the reversed queries, their output and
    log-sum-exp)."""
    n = q.shape[2]
    rows = values.unfold(-1, n, 1).unsqueeze(0)  # [1, h, n, n], row r: query n-1-r
    q_r = q.flip(2)  # reversed queries, a copy

    def mask(r0: int, r1: int, keys: int) -> torch.Tensor:
        return rows if r1 - r0 == keys == n else rows[:, :, r0:r1, :keys]

    out_r, lse_r = flash_forward(
        q_r,
        k,
        v,
        mask,
        scale,
        block=block,
        keys=(lambda r0, r1: n - r0) if causal else (lambda r0, r1: n),
    )
    return out_r.flip(2), q_r, out_r, lse_r


class _DistanceFlash(torch.autograd.Function):
    """The blockwise kernel calls over reversed queries and their backward (the module)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        values: torch.Tensor,
        scale: float,
        causal: bool,
        block: int,
        backward_block: int,
    ) -> torch.Tensor:
        out, q_r, out_r, lse_r = _forward(q, k, v, values, scale, causal, block)
        ctx.save_for_backward(q_r, k, v, values, out_r, lse_r)
        ctx.scale, ctx.causal, ctx.block = scale, causal, backward_block
        return out

    @staticmethod
    @once_differentiable  # a second derivative would need the backward's own graph
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q_r, k, v, values, out_r, lse_r = ctx.saved_tensors
        need = ctx.needs_input_grad
        b, h, n, _ = q_r.shape
        rows = values.unfold(-1, n, 1).unsqueeze(0)
        sink = DistanceGrad(b, h, n, ctx.block, values) if need[3] else None
        gq, gk, gv = flash_backward(
            grads[0].flip(2),
            q_r,
            k,
            v,
            rows,
            out_r,
            lse_r,
            ctx.scale,
            block=ctx.block,
            keys=(lambda i0, i1: n - i0) if ctx.causal else None,
            bias_grad=sink,
        )
        return (
            gq.flip(2).to(q_r.dtype) if need[0] else None,
            gk.to(k.dtype) if need[1] else None,
            gv.to(v.dtype) if need[2] else None,
            None if sink is None else sink.total,
            None,
            None,
            None,
            None,
        )


class DistanceGrad:
    """Sums the score gradients of a block of reversed queries into the gradient of the
    distance values: ``dS[·, a, j]`` of the block from row ``r0`` belongs to value
    ``r0 + a + j``, an anti-diagonal, which a skewed view of a ``[b·h, block, L + block]``
    buffer (row stride one more than its width) turns into a column.

    The buffer is zeroed once: the blocks come with non-decreasing key counts (the causal
    ones from the last query block to the first), so each block writes over everything
    the ones before it wrote.

    Shapes:
        ``ds`` ``[b·h, blk, keys]`` per block -> :attr:`total` ``[h, 2L - 1]``.
    """

    def __init__(self, b: int, h: int, n: int, block: int, values: torch.Tensor) -> None:
        self.b, self.h, self.n, self.width = b, h, n, n + block
        shape = (b * h, block, self.width)
        self.buffer = torch.zeros(shape, dtype=values.dtype, device=values.device)
        self.total = torch.zeros_like(values)  # [h, 2n - 1]

    def __call__(self, r0: int, ds: torch.Tensor) -> None:
        bh, rows, keys = ds.shape
        w = self.width
        skewed = self.buffer.as_strided((bh, rows, keys), (self.buffer.stride(0), w + 1, 1))
        skewed.copy_(ds)
        columns = self.buffer[:, :rows].view(self.b, self.h, rows, w).sum((0, 2))  # [h, w]
        span = min(rows + keys - 1, 2 * self.n - 1 - r0)
        self.total[:, r0 : r0 + span] += columns[:, :span]


def distance(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`by_distance` over the whole call; a given table is not read (the
    distances are the same values, and their backward reaches the encoding's parameters)."""
    assert call.encoding is not None, "the plan gives 'distance' to shift-invariant biases"
    return by_distance(call.q, call.k, call.v, call.encoding, call.scale, call.causal)


def by_distance(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding,
    scale: float,
    causal: bool,
    block: int | None = None,
) -> torch.Tensor:
    """:func:`distance_attention` over the encoding's distance values for these ``q_len``
    queries and keys (``rows`` runs FIRE's first queries on it too), which the encoding
    computes once per length, mask, device and dtype while it is unchanged
    (:meth:`~posenc.base.BiasEncoding.distance_values`)."""
    n = q.shape[2]
    spread = linear_spread(encoding, n, causal)
    values = encoding.distance_values(n, causal, q.device, math_dtype(q.dtype))
    return distance_attention(q, k, v, values, scale, causal, block, spread=spread)
