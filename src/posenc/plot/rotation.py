"""One 2-D pair of a vector at several positions: sinusoidal addition against RoPE rotation.

The sinusoidal encoding (Vaswani et al. 2017, arXiv:1706.03762) ADDS ``(sin pθ_i, cos pθ_i)``
to pair i of the embedding, which moves its tip around a circle centred on the vector: the
length and the direction both change with the position. RoPE (Su et al. 2021, "RoFormer",
arXiv:2104.09864, §3.2) ROTATES pair i by the angle ``p·θ_i``: the length is kept and only the
direction turns, so ``q·k`` depends on the relative position alone. Both use
``θ_i = base^(-2i/d)`` and the interleaved layout (pair i is dimensions ``2i, 2i + 1``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..functional import apply_rope, rope_cos_sin, sinusoidal, sinusoidal_inv_freq
from .common import check_number, check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["rotation"]


def rotation(
    dim: int = 8,
    pair: int = 0,
    positions: Sequence[int] = (0, 1, 2, 4, 8),
    base: float = 10000.0,
) -> Figure:
    """One 2-D pair (``pair``) of a vector at each position, added to (left) and rotated (right).

    Args:
        dim: the vector size (even).
        pair: which rotary pair to draw, ``0 .. dim/2 - 1`` (0 turns fastest).
        positions: the positions to draw (non-negative ints).
        base: the wavelength base of both encodings.

    Returns:
        The figure: two panels; in each, one line per position from the origin to the pair's
        point (label ``position p``), and the vector itself as a dashed line (label
        ``no position``).

    Raises:
        ValueError: for a bad value, naming the parameter.
    """
    check_size("dim", dim, minimum=2, even=True)
    if isinstance(pair, bool) or not isinstance(pair, int) or not 0 <= pair < dim // 2:
        raise ValueError(f"pair must be an int in [0, {dim // 2 - 1}], got {pair!r}")
    if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence):
        raise ValueError(f"positions must be a sequence of ints, got {positions!r}")
    if not positions:
        raise ValueError("positions must name at least one position")
    for p in positions:
        check_size("positions", p, minimum=0)
    check_number("base", base)

    x = torch.zeros(dim, dtype=torch.float64)
    x[0::2], x[1::2] = 1.0, 0.5  # a fixed vector: every pair is (1, 0.5)
    at = torch.tensor(list(positions), dtype=torch.float64)
    added = x + sinusoidal(at, dim, base, layout="interleaved")  # [n, dim]
    inv_freq = sinusoidal_inv_freq(dim, base, dtype=torch.float64)  # θ_i, the same for both
    cos, sin = rope_cos_sin(at, inv_freq)  # [n, dim/2]
    rotated = apply_rope(x.expand(1, 1, len(positions), dim), cos, sin, "interleaved")[0, 0]
    columns = [2 * pair, 2 * pair + 1]  # the interleaved layout: pair i is (2i, 2i + 1)
    wavelength = 2 * math.pi / float(inv_freq[pair])

    fig, axes = new_figure(
        2, f"pair {pair} of a {dim}-d vector (wavelength {wavelength:.4g} positions)", height=4.6
    )
    start = x[columns].tolist()
    panels = [  # the tips lie on a circle: of radius 1 around x, of radius |x| around 0
        (
            axes[0],
            added[:, columns],
            (start, 1.0),
            "sinusoidal: x + PE(p)\nlength and direction change",
        ),
        (
            axes[1],
            rotated[:, columns],
            ([0.0, 0.0], math.hypot(*start)),
            "RoPE: R(pθ) x\nthe length is kept",
        ),
    ]
    for ax, points, circle, title in panels:
        _draw(ax, start, points.tolist(), list(positions), circle, title)
    return fig


def _draw(
    ax: Axes,
    start: list[float],
    points: list[list[float]],
    positions: list[int],
    circle: tuple[list[float], float],
    title: str,
) -> None:
    """One panel: the vector (dashed), its pair at each position (lines from 0) and the
    circle ``(centre, radius)`` the tips lie on (dotted)."""
    from matplotlib import colormaps

    colours: Any = colormaps["viridis"]
    ax.plot([0.0, start[0]], [0.0, start[1]], "--", color="grey", label="no position")
    for k, ((u, v), p) in enumerate(zip(points, positions, strict=True)):
        colour = colours(k / max(len(positions) - 1, 1))
        ax.plot([0.0, u], [0.0, v], "-", color=colour, label=f"position {p}")
        ax.plot([u], [v], "o", color=colour)
    (cx, cy), radius = circle
    angles = [2 * math.pi * t / 200 for t in range(201)]
    ax.plot(
        [cx + radius * math.cos(a) for a in angles],
        [cy + radius * math.sin(a) for a in angles],
        ":",
        color="lightgrey",
        linewidth=1,
    )
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.axvline(0.0, color="grey", linewidth=0.5)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(title)
    ax.set_xlabel("first dimension of the pair (2i)")
    ax.set_ylabel("second dimension of the pair (2i + 1)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
