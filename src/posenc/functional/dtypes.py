"""The working dtypes of position math: the one place their rules are written down.

Two rules, used by every function and module of posenc:

- :func:`math_dtype`: tables and results are computed in float32, or in float64 when an
  input is float64 (a float64 gradcheck, a float64 reference), and rounded once to the
  caller's dtype at the end; bf16/fp16 inputs never set the working precision.
- :func:`wide_dtype`: angles, exponents and other products of positions that lose digits
  in float32 (an angle of 1e7 radians has a float32 spacing of 1) are formed in float64,
  or float32 on a device without float64 (Apple MPS).
"""

from __future__ import annotations

import torch

from ..arguments import check_device

__all__ = ["math_dtype", "wide_dtype"]


def math_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype position math runs in: float32, or float64 when an input is float64.

    Args:
        dtypes: the dtypes of the inputs (tensors' ``.dtype``), any number.

    Returns:
        ``torch.float64`` if one of ``dtypes`` is float64, else ``torch.float32``.
    """
    return torch.float64 if torch.float64 in dtypes else torch.float32


def wide_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """The widest float ``device`` computes in: float64, or float32 on Apple MPS.

    Args:
        device: where the math runs (None: the CPU).

    Returns:
        ``torch.float32`` on an MPS device, else ``torch.float64``.
    """
    device = check_device(device)
    if device is not None and device.type == "mps":
        return torch.float32
    return torch.float64
