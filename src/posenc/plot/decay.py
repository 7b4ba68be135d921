"""RoPE's long-term decay: the bound on ``q·k`` against the relative distance.

Su et al. 2021 ("RoFormer", arXiv:2104.09864, §3.4.3) write the rotated score of a query and
a key at relative distance ``r = m - n`` as ``Re Σ_k h_k e^{i r θ_k}`` and, by Abel
summation, bound it by ``max_k |h_{k+1} - h_k| · Σ_j |S_j|`` with
``S_j = Σ_{k<j} e^{i r θ_k}``. The relative bound ``(1/(d/2)) Σ_{j=1}^{d/2} |S_j|`` (their
Figure 2) decays with ``r``: far tokens can score less. A larger base or a scaling that
lowers the frequencies stretches the decay over longer distances.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..rotary.scaling import ScalingConfig, parse_scaling
from .common import check_number, check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["decay", "decay_bound"]

LINEAR_4: dict[str, Any] = {"rope_type": "linear", "factor": 4.0}


def decay(
    head_dim: int = 128,
    bases: Sequence[float] = (10000.0, 500000.0),
    scalings: Sequence[Mapping[str, Any] | None] = (None, LINEAR_4),
    max_distance: int = 4096,
) -> Figure:
    """The relative upper bound of RoPE's score against distance, per base and scaling.

    Args:
        head_dim: the size of each head (even): ``head_dim / 2`` rotary pairs.
        bases: the wavelength bases (``rope_theta``) to draw.
        scalings: the scalings to draw, each None (plain RoPE; ``none`` on the command
            line) or a Hugging Face ``rope_parameters`` dict (``{"rope_type": "linear",
            "factor": 4.0}``), validated by :func:`posenc.rotary.scaling.parse_scaling`.
        max_distance: the largest relative distance drawn (from 1: the x axis is log).

    Returns:
        The figure: one line per (base, scaling), x = distance ``1 .. max_distance``,
        y = :func:`decay_bound`, with a legend; log x.

    Raises:
        ValueError: for a bad value, naming the parameter.
    """
    check_size("head_dim", head_dim, minimum=2, even=True)
    check_size("max_distance", max_distance)
    if isinstance(bases, (str, bytes)) or not isinstance(bases, Sequence) or not bases:
        raise ValueError(f"bases must be a non-empty sequence of numbers, got {bases!r}")
    for base in bases:
        check_number("bases", base)
    records = [_check_scaling(s) for s in _check_scalings(scalings)]

    distances = torch.arange(1, max_distance + 1, dtype=torch.float64)
    title = f"RoPE long-term decay (Su et al. 2021, §3.4.3): head_dim {head_dim}"
    fig, (ax,) = new_figure(1, title, width=6.4, height=4.4)
    for base in bases:
        for record in records:
            inv_freq, _ = record.inv_freq(head_dim, head_dim, float(base))  # [head_dim // 2]
            bound = decay_bound(inv_freq, distances)
            ax.plot(distances.numpy(), bound.numpy(), label=f"base {base:g}, {_name(record)}")
    ax.set_xscale("log")
    ax.set_xlabel("relative distance m - n (tokens)")
    ax.set_ylabel("relative upper bound (1/(d/2)) Σ_j |S_j|")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="base, scaling")
    return fig


def decay_bound(inv_freq: torch.Tensor, distances: torch.Tensor) -> torch.Tensor:
    """``(1/(d/2)) Σ_{j=1}^{d/2} |S_j|``, ``S_j = Σ_{k<j} e^{i r θ_k}``, at each distance r.

    Args:
        inv_freq: the per-pair frequencies θ_k.
        distances: the relative distances r.

    Shapes:
        inv_freq ``[n_pairs]``, distances ``[n]`` -> ``[n]`` (float64)
    """
    angles = distances.double()[:, None] * inv_freq.double()[None, :]  # [n, n_pairs]
    partial = torch.polar(torch.ones_like(angles), angles).cumsum(-1)  # S_1 .. S_{d/2}
    return partial.abs().mean(-1)


def _check_scalings(scalings: Any) -> Sequence[Any]:
    if isinstance(scalings, (str, bytes, Mapping)) or not isinstance(scalings, Sequence):
        raise ValueError(f"scalings must be a sequence of None or dicts, got {scalings!r}")
    if not scalings:
        raise ValueError("scalings must name at least one scaling (None for plain RoPE)")
    return scalings


def _check_scaling(scaling: Any) -> ScalingConfig:
    """The validated record of one scaling; ``ValueError`` naming ``scalings`` otherwise."""
    if scaling is not None and not isinstance(scaling, (Mapping, ScalingConfig)):
        raise ValueError(f"scalings must hold None or rope_parameters dicts, got {scaling!r}")
    try:
        record, encoding_keys = parse_scaling(scaling)
    except (TypeError, ValueError) as error:
        raise ValueError(f"scalings: {error}") from None
    if encoding_keys:
        raise ValueError(f"scalings: give the base in bases, not {sorted(encoding_keys)}")
    return record


def _name(record: ScalingConfig) -> str:
    """A legend label: ``none`` or the rope_type with its factor."""
    if record.rope_type == "default":
        return "none"
    factor = getattr(record, "factor", None)
    return record.rope_type if factor is None else f"{record.rope_type} ×{factor:g}"
