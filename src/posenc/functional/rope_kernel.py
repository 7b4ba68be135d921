"""Which kernel rotates: :func:`apply_rope_fast`, the dispatcher every rotary encoding calls.

:func:`~posenc.functional.rope.apply_rope` (eager, pure) is the reference: read as written,
it makes four to six passes over ``x`` (slices, products, difference, ``cat``), about 3x the
memory floor (a copy of ``x``). The same function compiled by ``torch.compile`` (inductor,
``dynamic=True``: one graph per layout, cos/sin rank, dtype and autograd mode, whatever the
sizes) is one fused loop that reads ``x`` once and writes the result once, about 1.1x the
floor, with the same float32 operations in the same order (Su et al. 2021,
arXiv:2104.09864, for the rotation itself). The formula is not copied: the reference
function itself is compiled.

The compiled kernel is used when it pays, and only then:

- ``x`` holds at least :data:`COMPILE_MIN_NUMEL` elements (below, the call's own cost,
  dynamo's guards and the launch, outweighs the passes it saves);
- the device is a CPU on which inductor finds a vector instruction set
  (:func:`~posenc.functional.cpu.cpu_vector_isa`), or CUDA;
- not while ``torch.compile`` traces the caller: the outer graph inlines the reference and
  fuses it with its neighbours, which is better than a call to a separate graph; nor under
  ``torch.func`` transforms (``vmap``, ``grad``, ``jvp``) or ``torch.jit.trace``, which
  the reference supports;
- the switch is on: environment variable ``POSENC_COMPILE=0`` at import, or
  ``rope_kernel.ENABLED = False`` at any time, turns it off;
- it has not failed before: if compiling fails (no C compiler, a read-only cache directory,
  an inductor bug), the call is answered by the reference, a ``RuntimeWarning`` says why,
  and the process does not try again.

What the kernel costs (measured on a 2-core AMD EPYC, AVX2 kernels, torch 2.13, one thread,
``x`` ``[2, 16, seq, 128]``, against a copy of ``x`` in the same run):

- a fixed ~140 µs a call: dynamo's guards and the AOTAutograd and inductor wrappers (the
  kernel itself runs 8 µs at seq 8); hence :data:`COMPILE_MIN_NUMEL`;
- layout ``half``, float32: 1.06x at seq 2048, 1.45x at seq 512, where ``x`` (8 MiB) stays
  in the last-level cache: the copy runs at cache speed and the kernel's arithmetic and
  fixed cost show. bfloat16: 1.4-1.7x at 2048, 2-2.5x at 512 (the conversions to and from
  float32 cost more than the bytes they save);
- float32 ratios near 1.1x at seq 2048 measured without care mostly measure the allocator:
  an output of 32 MiB reaches glibc's largest ``mmap`` threshold, so every call (the
  copy's too) maps fresh pages and takes 8,193 page faults, three quarters of the copy's
  time (with ``MALLOC_MMAP_THRESHOLD_`` set high: the copy 20.2 -> 4.8 ms, the kernel
  25.6 -> 5.3 ms);
- layout ``interleaved`` compiles to a scalar loop: inductor does not vectorise the
  stride-2 stores of ``stack(..., dim=-1)``. float32 1.4x at 2048, 1.9x at 512; bfloat16
  6-12x (a scalar conversion per element). Formulations with the reference's roundings
  (``x·cos_rep + swap(x)·sin_signed`` with the swap as a ``flip`` or a ``stack`` of the
  pair, a ``roll`` or ``pad``-shifted neighbours under a parity ``where``; all bit-equal in
  float32 and bfloat16) compile to gathers or masked int64 index vectors: 1.4-4x slower
  still; de-interleaving, rotating as ``half`` and interleaving again (also bit-equal)
  costs two strided copies: 1.3-3x slower. A hand-written kernel would plug in at
  :func:`_kernel`.

A GPU kernel plugs in at :func:`_kernel`: today CUDA runs the same compiled function (its
Triton kernel) and any other device (MPS, XLA, meta) the eager reference; a hand-written
kernel for a device would be returned there, for the devices it serves. On a CPU posenc
imports no Triton: inductor's C++ backend builds the kernel (untested here on CUDA: no GPU
was available when this was written).

The gradient with respect to ``x`` is the rotation by -θ (``cos, -sin``), run by the same
kernel (:class:`_Rotate`): one pass, equal to the reference's gradient, and differentiable
again. When cos/sin need a gradient too (learned frequencies), the compiled function's own
backward (AOTAutograd) runs; that one has no double backward. The eager reference stays
the definition: a change to the formula goes there.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable

import torch

from .cpu import cpu_vector_isa
from .rope import ROPE_LAYOUTS, apply_rope

__all__ = ["COMPILE_MIN_NUMEL", "ENABLED", "apply_rope_fast", "compiled_rope_failed"]

#: the smallest ``x.numel()`` rotated by the compiled kernel. Measured on a 2-core AVX2 x86
#: machine (torch 2.13, float32, one thread): a compiled call costs a fixed ~60 µs (dynamo's
#: guards, the launch) against the eager reference's ~10 small ops, and saves about 3 passes
#: over ``x``; they break even near 2^16 elements (8 heads x 64 tokens x 128: forward 118 µs
#: eager, 125 µs compiled; forward+backward 490 and 476 µs), and at 2^17 the compiled call
#: is 1.3x (forward) and 1.4x (forward+backward) faster.
COMPILE_MIN_NUMEL = 1 << 16
#: the switch: False rotates with the eager reference everywhere (``POSENC_COMPILE=0``)
ENABLED = os.environ.get("POSENC_COMPILE", "1").strip().lower() not in ("0", "false", "no", "off")
#: dynamo keeps this many graphs of the compiled function (one per layout, cos/sin rank,
#: dtype, autograd mode and partial rotary); past dynamo's default of 8 it would silently
#: fall back to eager for the rest
RECOMPILE_LIMIT = 64
_LIMIT_NAME = (
    "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
)

RopeFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, str], torch.Tensor]
_failed: list[str] = []  # why compiling failed, once it has: then never again


@functools.cache
def _compiled() -> RopeFn:
    return torch.compile(apply_rope, dynamic=True)


def compiled_rope_failed() -> str | None:
    """Why the compiled kernel failed in this process (then the reference answers every
    call), or None if it has not."""
    return _failed[0] if _failed else None


def _kernel(x: torch.Tensor) -> RopeFn | None:
    """The fast kernel for ``x``'s device, or None for the eager reference.

    The place a device kernel plugs in: CPUs with a vector ISA and CUDA get the compiled
    reference (inductor's C++ and Triton kernels); a hand-written kernel would be returned
    here for the devices it serves.
    """
    if x.device.type == "cpu":
        return _compiled() if cpu_vector_isa() else None
    if x.device.type == "cuda":
        return _compiled()
    return None


def apply_rope_fast(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> torch.Tensor:
    """:func:`~posenc.functional.rope.apply_rope`, with the fastest kernel that computes it.

    Same arguments, shapes and result as the reference (equal in float32: the same
    operations in the same order, fused; a bfloat16 result may differ by one unit in the
    last place where the float32 value lies on a rounding boundary); differentiable. See
    the module docstring for when the compiled kernel is used.

    Shapes:
        x ``[batch, heads, seq, head_dim]``; cos, sin ``[seq, n]``, ``[batch, seq, n]`` or
        ``[batch or 1, heads, seq, n]`` with ``2n <= head_dim`` ->
        ``[batch, heads, seq, head_dim]``

    Example:
        >>> import torch
        >>> from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq
        >>> cos, sin = rope_cos_sin(torch.arange(5), rope_inv_freq(8)[0])
        >>> x = torch.randn(1, 2, 5, 8)
        >>> torch.equal(apply_rope_fast(x, cos, sin), apply_rope(x, cos, sin))
        True
    """
    if (
        torch.compiler.is_compiling()  # first: the size test would add a guard to the trace
        or torch.jit.is_tracing()  # a TorchScript trace records the reference's ops
        or not ENABLED
        or _failed
        or x.numel() < COMPILE_MIN_NUMEL
        or layout not in ROPE_LAYOUTS  # let the reference raise its ValueError
        or torch._C._are_functorch_transforms_active()  # vmap, grad, jvp: the reference
    ):
        return apply_rope(x, cos, sin, layout)
    kernel = _kernel(x)
    if kernel is None:
        return apply_rope(x, cos, sin, layout)
    if x.requires_grad and torch.is_grad_enabled() and not (cos.requires_grad or sin.requires_grad):
        return _Rotate.apply(x, cos, sin, layout, kernel)
    # no gradient, or one for cos/sin too (RoPE-Mixed's learned frequencies): the compiled
    # function differentiates itself (AOTAutograd)
    return _run(kernel, x, cos, sin, layout)


class _Rotate(torch.autograd.Function):
    """The rotation with its backward as another rotation: the gradient of ``R(θ) x`` is
    ``R(-θ) g``, the same kernel with ``(cos, -sin)``. It computes exactly what the
    reference's backward does (``g1·cos + g2·sin`` and ``g2·cos - g1·sin``, each product
    rounded, then the two-term sum: negating is exact), in one pass instead of
    AOTAutograd's, and is differentiable again (double backward). x only: cos/sin get no
    gradient here."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout, kernel):
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return _run(kernel, x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return apply_rope_fast(grad, cos, -sin, ctx.layout), None, None, None, None


def _run(kernel: RopeFn, x, cos, sin, layout) -> torch.Tensor:
    """``kernel(x, cos, sin, layout)``; if it fails, the reference (and never again)."""
    # dynamo reads the limit only when a call misses its graphs; set by hand, not with
    # config.patch (30 µs a call, against 10)
    config = torch._dynamo.config
    limit = getattr(config, _LIMIT_NAME)
    setattr(config, _LIMIT_NAME, max(limit, RECOMPILE_LIMIT))
    try:
        return kernel(x, cos, sin, layout)
    except Exception as error:
        out = apply_rope(x, cos, sin, layout)  # bad input raises here, as it would eagerly
        _failed.append(f"{type(error).__name__}: {error}".splitlines()[0])
        warnings.warn(
            f"posenc: the compiled RoPE kernel failed ({_failed[0]}); rotating with the eager "
            "reference from now on (set POSENC_COMPILE=0 to skip the attempt)",
            RuntimeWarning,
            stacklevel=3,
        )
        return out
    finally:
        setattr(config, _LIMIT_NAME, limit)
