"""A loaded transformers model's q and k rotated by posenc's Triton kernel:
``apply(model, kernel="triton")``.

transformers' attention layers rotate q and k with their modeling module's
``apply_rotary_pos_emb(q, k, cos, sin)``, looked up when they call it. As Liger-Kernel does,
:func:`patch` replaces that function, in the modeling module of each patched model type, by
one that rotates q and k in one launch of posenc's kernel
(:func:`~posenc.functional.rope_triton.rope_triton_tables`: float32 math, rounded once)
where the kernel runs (CUDA, or the CPU under ``TRITON_INTERPRET=1``) and calls the module's
own function everywhere else (other devices, partial rotary tables, another
``unsqueeze_dim``). Every model of that type in the process rotates with it until the last
patched one is undone (:func:`unpatch`).

Checked when patching: the module's own function must equal posenc's reference rotation
(:func:`~posenc.functional.rope.apply_rope`, pairs of halves, tables of the ``"cat"`` form)
on random inputs; a model type that rotates another way (interleaved pairs, complex tables)
is refused by name.

Shapes (transformers'):
    q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``, cos, sin
    ``[batch, seq, head_dim]`` -> ``(q, k)`` rotated, in their dtype.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..functional.rope import apply_rope
from ..functional.rope_kernel import rotate_with_triton
from ..functional.rope_triton_checks import runs_on

__all__ = ["FUNCTION", "patch", "unpatch"]

#: the name of the rotation in a transformers modeling module
FUNCTION = "apply_rotary_pos_emb"
#: each patched modeling module: its own function and how many models patched it
_PATCHED: dict[str, tuple[Callable[..., Any], int]] = {}


def patch(attention_types: Iterable[type]) -> list[str]:
    """Replace the rotation of the modeling modules of ``attention_types`` (the model's
    attention classes) by the kernel's; the modules' names, for :func:`unpatch`.

    Raises:
        ValueError: a module has no ``apply_rotary_pos_emb``, or its own does not rotate as
            posenc's reference does (named).
    """
    names = sorted({cls.__module__ for cls in attention_types})
    for name in names:  # every check first: nothing is patched when one is refused
        if name not in _PATCHED:
            _check_rotates_as_posenc(name, getattr(sys.modules[name], FUNCTION, None))
    for name in names:
        module = sys.modules[name]
        own, count = _PATCHED.get(name, (getattr(module, FUNCTION), 0))
        _PATCHED[name] = (own, count + 1)
        setattr(module, FUNCTION, _kernel_rotation(own))
    return names


def unpatch(names: Iterable[str]) -> None:
    """Undo one :func:`patch` of each module named: its own function back when no patched
    model is left."""
    for name in names:
        own, count = _PATCHED[name]
        if count > 1:
            _PATCHED[name] = (own, count - 1)
            continue
        del _PATCHED[name]
        setattr(sys.modules[name], FUNCTION, own)


def _kernel_rotation(own: Callable[..., Any]) -> Callable[..., Any]:
    """``apply_rotary_pos_emb`` by the kernel where it runs, by ``own`` elsewhere."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        width = cos.shape[-1]
        if unsqueeze_dim != 1 or width != q.shape[-1] or width % 2 or not runs_on(q.device):
            return own(q, k, cos, sin, unsqueeze_dim)
        half = width // 2  # the "cat" form: the n frequencies, then again
        return rotate_with_triton(q, k, cos[..., :half].float(), sin[..., :half].float(), "half")

    apply_rotary_pos_emb.__wrapped__ = own  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _check_rotates_as_posenc(name: str, own: Callable[..., Any] | None) -> None:
    """Raise unless ``own`` rotates q and k as :func:`apply_rope` does with the halves
    layout and ``"cat"`` tables (random inputs, float32: a few ulp apart at most)."""
    if own is None:
        raise ValueError(f"{name} has no {FUNCTION}: kernel='triton' cannot rotate its q and k")
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(2))
    angles = torch.rand(1, 5, 4, generator=gen) * 6
    cos, sin = angles.cos(), angles.sin()
    try:
        got = own(q, k, torch.cat((cos, cos), -1), torch.cat((sin, sin), -1))
    except Exception as error:  # a function of another signature (complex tables)
        got = error
    expected = [apply_rope(x, cos[:, None], sin[:, None], "half") for x in (q, k)]
    same = not isinstance(got, BaseException) and all(
        torch.allclose(g, e, atol=1e-6, rtol=1e-6) for g, e in zip(got, expected, strict=True)
    )
    if not same:
        raise ValueError(
            f"{name}.{FUNCTION} does not rotate pairs of halves with (cos, cos) tables as "
            "posenc's kernel does: kernel='triton' is not applied (kernel='auto' keeps the "
            "model's own rotation)"
        )
