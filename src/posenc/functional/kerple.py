"""KERPLE: kernelized relative positional embedding (Chi et al. 2022, "KERPLE: Kernelized
Relative Positional Embedding for Length Extrapolation", NeurIPS 2022, arXiv:2205.09921).

The bias of a query at ``m`` and a key at ``n`` is a conditionally positive definite (CPD)
kernel of their distance, shifted so that it is 0 at ``m = n``:

    log:    b(m, n) = -r1 · log(1 + r2 · |m - n|)      r1 > 0, r2 > 0
    power:  b(m, n) = -r1 · |m - n|^r2                 r1 > 0, 0 < r2 <= 2

``-|x|^p`` is CPD only for ``0 < p <= 2``, hence the cap on the power kernel's exponent
(paper §4; with ``r2 = 1`` the power kernel is ALiBi with a learned slope). ``r1`` and
``r2`` are learned per head. For positive parameters both kernels are 0 at distance 0 and
strictly decrease with the distance: farther keys always get a lower score.
"""

from __future__ import annotations

import torch

from ..arguments import check_choice, check_devices, check_float, check_tensor

__all__ = ["KERPLE_VARIANTS", "clamp_straight_through", "kerple_bias"]

#: ``log``: ``-r1·log(1 + r2·d)`` (the paper's best); ``power``: ``-r1·d^r2``
KERPLE_VARIANTS = ("log", "power")


def kerple_bias(
    distance: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, variant: str = "log"
) -> torch.Tensor:
    """The KERPLE bias at a distance ``|m - n|``, elementwise.

    Args:
        distance: ``|m - n| >= 0``, floating.
        r1: the kernel's scale, ``> 0``.
        r2: ``log``: the distance scale inside the log, ``> 0``; ``power``: the exponent,
            in ``(0, 2]``.
        variant: one of :data:`KERPLE_VARIANTS`.

    The parameters are used as given; keeping them in range is the caller's job (see
    :func:`clamp_straight_through`).

    Shapes:
        distance, r1, r2: broadcastable -> their broadcast shape
    """
    check_tensor("distance", distance)
    check_tensor("r1", r1)
    check_tensor("r2", r2)
    check_devices(distance=distance, r1=r1, r2=r2)
    check_choice("variant", variant, KERPLE_VARIANTS)
    if variant == "log":
        return -r1 * torch.log1p(r2 * distance)
    return -r1 * distance.pow(r2)


def clamp_straight_through(x: torch.Tensor, low: float, high: float | None = None) -> torch.Tensor:
    """``x`` clamped to ``[low, high]`` in the forward pass, the identity in the backward.

    The KERPLE reference clamps its parameters in place before every forward
    (``p.data = p.data.clamp(min=1e-2)``), so a parameter pushed out of range sits on the
    bound and still receives the gradient computed there. This gives the same value and the
    same gradient for that step without mutating the parameter (which a traced or compiled
    forward cannot do): unlike a plain ``clamp``, whose gradient is 0 outside the range, a
    parameter that leaves the range can come back. It is not the same training trajectory:
    the stored parameter may drift past the bound, and must climb back before the value
    moves again (the reference resets it to the bound each step). The value is exact:
    ``(x - x) + clamp(x)``.

    Shapes:
        x: any -> same shape
    """
    check_tensor("x", x)
    check_float("low", low, positive=False)
    if high is not None:
        check_float("high", high, positive=False)
        if high < low:
            raise ValueError(f"high must be >= low, got low={low}, high={high}")
    held = x.detach()
    return x - held + held.clamp(low, high)
