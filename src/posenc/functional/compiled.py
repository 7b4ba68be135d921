"""Running a pure function compiled by ``torch.compile`` (inductor), with the same function
run eagerly as its fallback: what posenc's fused kernels (the RoPE rotation, FIRE's
piecewise MLP) share.

A :class:`CompiledFunction` wraps one function of this package, compiled lazily with
``dynamic=True`` (one graph per dtype, rank and autograd mode, whatever the sizes). It runs
compiled only when all of these hold (:meth:`CompiledFunction.usable`):

- the device is a CPU on which inductor finds a vector instruction set
  (:func:`~posenc.functional.cpu.cpu_vector_isa`), or CUDA;
- the caller is not being traced by ``torch.compile`` (its graph inlines the function and
  fuses it with its neighbours, better than a call to a separate graph), by
  ``torch.jit.trace``, or transformed by ``torch.func`` (``vmap``, ``grad``, ``jvp``);
- :data:`ENABLED` is true (``POSENC_COMPILE=0`` at import, or ``ENABLED = False`` at any
  time, turns every compiled kernel off);
- compiling this function has not failed in this process: a failure (no C compiler, a
  read-only cache, an inductor bug) is answered by the eager function with one
  ``RuntimeWarning``, and the process does not try again (:attr:`CompiledFunction.failed`
  says why).

Compiled, a function computes what it computes eagerly, fused: the same float32 operations
in the same order, so the results are equal or within the rounding of a reordered sum.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .cpu import cpu_vector_isa

__all__ = ["ENABLED", "CompiledFunction", "many_graphs", "tracing"]

#: the switch: False runs every kernel's eager function (``POSENC_COMPILE=0``)
ENABLED = os.environ.get("POSENC_COMPILE", "1").strip().lower() not in ("0", "false", "no", "off")
#: dynamo keeps this many graphs of a compiled function (:func:`many_graphs`); past
#: dynamo's default of 8 it would silently fall back to eager for the rest
RECOMPILE_LIMIT = 64


def tracing() -> bool:
    """Whether the caller is being traced or transformed (``torch.compile``,
    ``torch.jit.trace``, ``torch.func``): then a kernel runs its eager function, which the
    trace records or the transform sees through."""
    return (
        torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or torch._C._are_functorch_transforms_active()
    )


class CompiledFunction:
    """``fn`` compiled by inductor where that is usable, ``fn`` itself otherwise.

    Args:
        fn: a pure function of tensors (and hashable options).
        what: its name in the warning a failed compile gives.

    Attributes:
        failed: why compiling failed in this process (then ``fn`` answers every call), or
            None.
    """

    def __init__(self, fn: Callable[..., Any], what: str) -> None:
        self.fn, self.what = fn, what
        self.failed: str | None = None

    @functools.cached_property
    def compiled(self) -> Callable[..., Any]:
        """``torch.compile(fn, dynamic=True)``, made on first use."""
        return torch.compile(self.fn, dynamic=True)

    def usable(self, device: torch.device) -> bool:
        """Whether a call on ``device`` runs compiled (see the module)."""
        if not ENABLED or self.failed is not None or tracing():
            return False
        if device.type == "cpu":
            return cpu_vector_isa()
        return device.type == "cuda"

    def __call__(self, *args: Any) -> Any:
        """``fn(*args)``, compiled; if compiling fails, ``fn(*args)`` (and never again)."""
        try:
            with many_graphs():
                return self.compiled(*args)
        except Exception as error:
            out = self.fn(*args)  # bad input raises here, as it would eagerly
            self.failed = f"{type(error).__name__}: {error}".splitlines()[0]
            warnings.warn(
                f"posenc: the compiled {self.what} kernel failed ({self.failed}); running the "
                "eager function from now on (set POSENC_COMPILE=0 to skip the attempt)",
                RuntimeWarning,
                stacklevel=3,
            )
            return out


@contextlib.contextmanager
def many_graphs() -> Iterator[None]:
    """Within, dynamo keeps up to :data:`RECOMPILE_LIMIT` graphs of a compiled function
    (one per shape class, dtype and autograd mode a process plausibly meets): past its
    default of 8 it would run the function uncompiled without a word (flex attention
    then builds the whole score matrix). Dynamo reads the limit only when a call misses
    its graphs; set by hand, as ``config.patch`` costs a call three times as much."""
    import torch._dynamo  # here, not at import: it takes a second `import posenc` need not

    config, name = torch._dynamo.config, _limit_name()
    limit = getattr(config, name)
    setattr(config, name, max(limit, RECOMPILE_LIMIT))
    try:
        yield
    finally:
        setattr(config, name, limit)


@functools.cache
def _limit_name() -> str:
    """The name of dynamo's recompile limit: ``cache_size_limit`` before torch 2.7 renamed
    it ``recompile_limit``."""
    import torch._dynamo

    renamed = hasattr(torch._dynamo.config, "recompile_limit")
    return "recompile_limit" if renamed else "cache_size_limit"
