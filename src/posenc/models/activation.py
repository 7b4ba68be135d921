"""The MLP's exact GELU on ATen's own CPU kernel (Hendrycks & Gimpel 2016, arXiv:1606.08415:
``x Φ(x)``).

On a CPU, ATen hands the exact (erf) GELU of a contiguous float32, bfloat16 or float16
tensor to oneDNN's eltwise primitive, and keeps every other tensor for its own vectorised
kernel (``use_mkldnn`` in ATen's ``Activation.cpp``). Inside a one-token forward of a small
model the oneDNN call took 21-26 µs where ATen's kernel took 2.5 µs (torch 2.13, the
2-core AMD EPYC, ``torch.profiler``): a tenth of the forward's host time, for 512 values.
ATen's kernel is also the more exact of the two (largest error against float64 4.5e-7,
oneDNN's 1.1e-6, on 2^20 standard normal values). The only switch between them is the
process-wide ``torch.backends.mkldnn`` flag, which would change other threads' ops.

:func:`gelu` gives ATen the same memory seen with two dimensions swapped, which is not
contiguous. An elementwise kernel writes its result in its input's memory order, so
swapping the result back is a contiguous view of it: no copy either way, and the values
in the order of ``x``. Where no swap can make ``x`` non-contiguous (a prime number of
values, or fewer than 4) it calls ``F.gelu`` as it is; elsewhere (CUDA, the tanh form, a
graph that ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` records) the swap
would change nothing and is not made.

Shapes:
    x: any -> the same, its dtype.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GELU", "gelu"]

#: the dtypes whose contiguous CPU tensors ATen gives to oneDNN
_ONEDNN_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


class GELU(nn.GELU):
    """``nn.GELU`` whose exact form runs on ATen's own CPU kernel (:func:`gelu`); the
    same class name, arguments and (empty) state as torch's."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu(input, self.approximate)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``F.gelu(x, approximate=approximate)``, computed by ATen's kernel on the CPU (see the
    module's docstring).

    Shapes:
        x: any -> the same, its dtype.

    Example:
        >>> x = torch.linspace(-3, 3, 8)
        >>> torch.allclose(gelu(x), F.gelu(x), rtol=0, atol=2e-6)
        True
    """
    if (
        approximate == "none"
        and x.dtype in _ONEDNN_DTYPES
        and x.is_cpu  # (no device object made)
        and x.is_contiguous()  # else ATen's kernel already
        and not (torch.compiler.is_compiling() or torch._C._get_tracing_state())
    ):
        n = x.numel()
        rows = _least_factor(n)
        if rows:  # x as [rows, n / rows], swapped
            width = n // rows
            if torch.is_grad_enabled() and x.requires_grad:  # views autograd undoes cheaply
                return F.gelu(x.view(rows, width).t()).t().view(x.shape)
            # one view each way (2 µs less than four; as_strided's backward would copy)
            out = F.gelu(x.as_strided((width, rows), (1, width)))
            return out.as_strided(x.shape, x.stride())
    return F.gelu(x, approximate=approximate)


@lru_cache(maxsize=64)
def _least_factor(n: int) -> int:
    """The least factor of ``n`` above 1 and below ``n``, or 0 (``n`` prime, 0 or 1)."""
    return next((f for f in range(2, math.isqrt(n) + 1) if n % f == 0), 0)
