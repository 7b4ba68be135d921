"""What this CPU can compile: whether inductor finds a vector instruction set on it.

Inductor's C++ backend builds its vectorised kernels for AVX2 or AVX-512 (x86) and NEON/SVE
(Arm). Without one (an old CPU, or ``ATEN_CPU_CAPABILITY=default``) some kernels (flex
attention's) do not compile at all and fused element-wise kernels lose what made them pay.
"""

from __future__ import annotations

import functools

__all__ = ["cpu_vector_isa"]


@functools.cache
def cpu_vector_isa() -> bool:
    """Whether inductor picks a vector instruction set on this CPU (cached per process).

    Example:
        >>> from posenc.functional.cpu import cpu_vector_isa
        >>> isinstance(cpu_vector_isa(), bool)
        True
    """
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # pragma: no cover - other torch layouts: let compile decide
        return True
    return bool(pick_vec_isa())
