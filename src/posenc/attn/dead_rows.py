"""Query rows that may see no key: opened for the softmax kernels, zeroed in the output.

A row with no key (a pad query, a query before every key, a window that hides all) has
no softmax: kernels give NaN or zeros depending on the version and the device. Every
runner opens such rows before its kernel (:func:`open_dead_rows`) and zeroes their output
after it (:func:`zero_dead_rows`), so they give zeros and no gradient, never NaN.
"""

from __future__ import annotations

import torch

__all__ = ["open_dead_rows", "zero_dead_rows"]


def open_dead_rows(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Let query rows that may see no key see every key, and say which they were.

    A row with no key (a pad query, or a query before every key) has no softmax: kernels
    give NaN or zeros depending on the version and the device. Opened, it gives finite
    values, which the caller replaces by zeros (:func:`zero_dead_rows`); its gradient is
    then exactly zero, never NaN. No value is read (no device sync, fine on meta).

    Shapes:
        allowed ``[..., q_len | 1, k_len]`` -> (the same, dead ``[..., q_len | 1, 1]``).
    """
    dead = ~allowed.any(dim=-1, keepdim=True)
    return allowed | dead, dead


def zero_dead_rows(out: torch.Tensor, dead: torch.Tensor | None) -> torch.Tensor:
    """Zeros in the output rows of queries that see no key (see :func:`open_dead_rows`).

    Shapes:
        out ``[batch, heads, q_len, d]``; dead ``[batch | 1, 1, q_len, 1]`` or None.
    """
    return out if dead is None else out.masked_fill(dead, 0.0)
