"""Which kernel rotates: :func:`apply_rope_fast`, the dispatcher every rotary encoding calls.

It returns what :func:`~posenc.functional.rope.apply_rope` returns, for the same shapes,
computed by that same function compiled with ``torch.compile`` (inductor,
``dynamic=True``) when that pays and by the eager reference otherwise. Read as written,
the reference makes four to six passes over ``x``; compiled, it is one fused loop with the
same float32 operations in the same order, so the results are equal. The formula is never
copied: the reference itself is compiled, and a change to the formula goes there.

The compiled kernel runs only when all of these hold:

- ``x`` holds at least :data:`COMPILE_MIN_NUMEL` elements (below, the call's fixed cost,
  dynamo's guards and the launch, outweighs the passes it saves);
- the device is a CPU on which inductor finds a vector instruction set
  (:func:`~posenc.functional.cpu.cpu_vector_isa`), or CUDA: :func:`_kernel` decides, and a
  hand-written kernel for a device would be returned there;
- the caller is not being traced by ``torch.compile`` (its graph inlines the reference and
  fuses it with its neighbours, better than a call to a separate graph), by
  ``torch.jit.trace``, or transformed by ``torch.func`` (``vmap``, ``grad``, ``jvp``);
- :data:`ENABLED` is true (``POSENC_COMPILE=0`` at import, or ``ENABLED = False`` at any
  time, turns it off);
- compiling has not failed in this process: a failure (no C compiler, a read-only cache,
  an inductor bug) is answered by the reference with one ``RuntimeWarning``, and the
  process does not try again (:func:`compiled_rope_failed` says why).

The gradient with respect to ``x`` is the rotation by ``-θ``, run by the same kernel
(:class:`_Rotate`): one pass, differentiable again. When cos/sin need a gradient too
(learned frequencies), AOTAutograd's backward runs, which has no double backward.

The measurements behind these choices: ``docs/design-notes.md``, "The compiled RoPE kernel".
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

#: the smallest ``x.numel()`` rotated by the compiled kernel: about where a compiled call's
#: fixed cost and the passes it saves break even on a CPU (``docs/design-notes.md``)
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
    # dynamo reads the limit only when a call misses its graphs; set by hand, as
    # config.patch costs a call three times as much
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
