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
- the conditions of :class:`~posenc.functional.compiled.CompiledFunction` hold (a CPU
  with a vector ISA or CUDA, no trace or ``torch.func`` transform around the call,
  ``posenc.functional.compiled.ENABLED``, no earlier failure to compile in this process:
  then the reference answers with one ``RuntimeWarning``, and :func:`compiled_rope_failed`
  says why).

The gradient with respect to ``x`` is the rotation by ``-θ``, run by the same kernel
(:class:`_Rotate`): one pass, differentiable again. When cos/sin need a gradient too
(learned frequencies), AOTAutograd's backward runs, which has no double backward.

The measurements behind these choices: ``docs/design-notes.md``, "The compiled RoPE kernel".

``kernel="triton"`` asks for the hand-written Triton kernel instead
(:func:`~posenc.functional.rope_triton.rope_triton_tables`), on CUDA tensors or under
Triton's interpreter: never chosen by itself, since no GPU run has measured it faster
than the compiled path on the shapes it would win (``docs/gpu.md``).
"""

from __future__ import annotations

import importlib.util
from typing import cast

import torch

from ..arguments import check_choice
from .compiled import CompiledFunction, tracing
from .rope import (
    check_rope_inputs,
    narrow_tables,
    rotate_pairs,
    rotate_qk,
    rotate_wide,
    shared_wide_tables,
)

__all__ = [
    "COMPILE_MIN_NUMEL",
    "ROPE_KERNELS",
    "apply_rope_fast",
    "check_rope_kernel",
    "compiled_rope_failed",
    "rotate_checked",
    "rotate_heads_checked",
    "rotate_pair_checked",
    "rotate_with_triton",
]

#: the kernels a rotary encoding may ask for: ``auto`` (the choice above) or ``triton``
ROPE_KERNELS = ("auto", "triton")

#: the smallest ``x.numel()`` rotated by the compiled kernel: about where a compiled call's
#: fixed cost and the passes it saves break even on a CPU (``docs/design-notes.md``)
COMPILE_MIN_NUMEL = 1 << 16
#: the reference, compiled (the place a hand-written kernel for a device would plug in)
KERNEL = CompiledFunction(rotate_pairs, "RoPE")


def compiled_rope_failed() -> str | None:
    """Why the compiled kernel failed in this process (then the reference answers every
    call), or None if it has not."""
    return KERNEL.failed


def check_rope_kernel(kernel: str) -> None:
    """Raise ``ValueError`` unless ``kernel`` is one of :data:`ROPE_KERNELS` and can run
    here (``triton`` needs Triton installed)."""
    if kernel not in ROPE_KERNELS:
        raise ValueError(f"kernel must be one of {list(ROPE_KERNELS)}, got {kernel!r}")
    # not imported here: Triton reads TRITON_INTERPRET when its kernels are defined
    if kernel == "triton" and importlib.util.find_spec("triton") is None:
        raise ValueError("kernel='triton' needs Triton (pip install triton): not installed")


def apply_rope_fast(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "half",
    kernel: str = "auto",
    offset: int = 0,
) -> torch.Tensor:
    """:func:`~posenc.functional.rope.apply_rope`, with the fastest kernel that computes it.

    Same arguments, shapes and result as the reference (equal in float32: the same
    operations in the same order, fused; a bfloat16 result may differ by one unit in the
    last place where the float32 value lies on a rounding boundary); differentiable. See
    the module docstring for when the compiled kernel is used. ``kernel="triton"``: the
    Triton kernel, for float32/bfloat16/float16 ``x`` on CUDA (cos/sin with one rotation
    for every head, needing no gradient). ``offset``: the first rotary channel (DeepSeek-V4
    turns the last ones, :func:`~posenc.functional.rope.rotary_offset`); the channels
    before it pass unchanged.

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
    check_rope_inputs(x, cos, sin, layout, offset)
    check_choice("kernel", kernel, ROPE_KERNELS)  # Triton's presence: checked where chosen
    return rotate_checked(x, cos, sin, layout, kernel, offset)


def rotate_checked(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    kernel: str = "auto",
    offset: int = 0,
) -> torch.Tensor:
    """:func:`apply_rope_fast` of inputs already checked: a rotary encoding's ``rotate``,
    which checked ``x`` against its own tables (:func:`posenc.rotary.inputs.check_rotate`)
    and took ``layout``, ``kernel`` and ``offset`` from its validated config, so a layer's
    call checks once, not twice.

    Shapes:
        as :func:`apply_rope_fast`.
    """
    if kernel != "auto":
        return rotate_with_triton(x, None, cos, sin, layout, offset)[0]
    return _rotate(x, cos, sin, layout, offset)


def rotate_pair_checked(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    kernel: str = "auto",
    offset: int = 0,
    *,
    wide: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rotate_checked` of q and k at the same positions, checked as it requires:
    one launch of the Triton kernel for both (``kernel="triton"``); one pass over both
    (:func:`~posenc.functional.rope.rotate_qk`) where their cost is the host's (small
    tensors of one dtype, one rotation for every row of the batch, outside a compiled
    graph, which fuses each rotation as it stands); each by the compiled kernel otherwise,
    whose cost is their bytes (stacking them would copy them). ``wide``: cos and sin are
    widened (:func:`~posenc.functional.rope.widen_tables`).

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``, cos,
        sin as :func:`apply_rope_fast` (``[..., 2n]`` with ``wide``) -> q, k rotated.
    """
    if q.dtype == k.dtype and _one_pass(q.numel() + k.numel(), cos, kernel, offset):
        return rotate_qk(q, k, cos, sin, layout, wide=wide)
    if wide:
        cos, sin = narrow_tables(cos, sin, layout)
    if kernel != "auto":
        q_out, k_out = rotate_with_triton(q, k, cos, sin, layout, offset)
        return q_out, cast(torch.Tensor, k_out)
    return _rotate(q, cos, sin, layout, offset), _rotate(k, cos, sin, layout, offset)


def rotate_heads_checked(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    kernel: str = "auto",
    offset: int = 0,
    *,
    wide: bool = False,
) -> torch.Tensor | None:
    """q's and k's heads side by side in one tensor (a projection's view of both) turned
    as :func:`rotate_pair_checked` turns them where it takes one pass: the same
    :func:`~posenc.functional.rope.rotate_wide` on the same elements, without stacking
    them first; None where it would not take that pass (the caller turns q and k apart).

    Shapes:
        x ``[batch, heads + kv_heads, seq, head_dim]``; cos, sin as
        :func:`rotate_pair_checked` -> x's shape, or None.
    """
    if not _one_pass(x.numel(), cos, kernel, offset):
        return None
    return rotate_wide(x, *shared_wide_tables(cos, sin, layout, wide), layout)


def _one_pass(numel: int, cos: torch.Tensor, kernel: str, offset: int) -> bool:
    """Whether q and k (``numel`` elements together) turn in one pass of
    :func:`~posenc.functional.rope.rotate_wide`: small, one rotation for every row of the
    batch, all of each head's channels from the first, outside a compiled graph (which
    fuses each rotation as it stands)."""
    return (
        kernel == "auto"
        and not offset
        and (cos.dim() == 2 or (cos.dim() == 3 and cos.shape[0] == 1))
        and not torch.compiler.is_compiling()  # first: under a trace the size test guards
        and numel < COMPILE_MIN_NUMEL
    )


def _rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, offset: int = 0
) -> torch.Tensor:
    """:func:`apply_rope_fast`'s ``kernel="auto"`` of checked inputs."""
    if offset:
        tail = _rotate(x[..., offset:], cos, sin, layout)
        return torch.cat([x[..., :offset], tail], dim=-1)
    if (
        tracing()  # first: under a trace, the size test would add a guard
        or x.numel() < COMPILE_MIN_NUMEL
        or not KERNEL.usable(x.device)  # last: its first call probes the CPU (about 1.5 s)
    ):
        return rotate_pairs(x, cos, sin, layout)
    if x.requires_grad and torch.is_grad_enabled() and not (cos.requires_grad or sin.requires_grad):
        return _Rotate.apply(x, cos, sin, layout)
    # no gradient, or one for cos/sin too (RoPE-Mixed's learned frequencies): the compiled
    # function differentiates itself (AOTAutograd)
    return KERNEL(x, cos, sin, layout)


def rotate_with_triton(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``q`` (and ``k``) rotated in one launch of the Triton kernel
    (:func:`~posenc.functional.rope_triton.rope_triton_tables`; the rotary channels from
    ``offset``), or a ``ValueError`` saying why it cannot run on their device."""
    # Triton imported at the first use
    from .rope_triton import rope_triton_tables
    from .rope_triton_checks import check_runs_here

    check_runs_here(q, "q", "kernel='triton'", ": create the encoding with kernel='auto' here")
    return rope_triton_tables(q, k, cos, sin, layout, rotary_offset=offset)


class _Rotate(torch.autograd.Function):
    """The rotation with its backward as another rotation: the gradient of ``R(θ) x`` is
    ``R(-θ) g``, the same kernel with ``(cos, -sin)``. It computes exactly what the
    reference's backward does (``g1·cos + g2·sin`` and ``g2·cos - g1·sin``, each product
    rounded, then the two-term sum: negating is exact), in one pass instead of
    AOTAutograd's, and is differentiable again (double backward). x only: cos/sin get no
    gradient here."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout):
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return KERNEL(x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return _rotate(grad, cos, -sin, ctx.layout), None, None, None
