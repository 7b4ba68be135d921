"""The encoding matrix of an additive encoding as an image: the article's first figure.

Vaswani et al. 2017 ("Attention Is All You Need", arXiv:1706.03762, §3.5) add
``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(...)`` to the token
embeddings; drawn with X = dimension and Y = position, the low dimensions change fast with
the position and the high ones slowly: each position gets its own row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .. import registry
from ..base import AdditiveEncoding
from .common import check_encoding, check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["heatmap"]


def heatmap(encoding: str = "sinusoidal", dim: int = 128, positions: int = 50) -> Figure:
    """The matrix ``encode(arange(positions))`` of an additive encoding: X dimension, Y position.

    Learned encodings are drawn at their initialisation (the title says so).

    Args:
        encoding: the name of a 1-D additive encoding (``sinusoidal``, ``learned``, ...).
        dim: the embedding size.
        positions: how many positions (rows), from 0.

    Returns:
        The figure: one image whose array is the ``[positions, dim]`` encoding matrix, and
        a colour bar.

    Raises:
        ValueError: for a bad value (naming the parameter) or an encoding that is not
            additive.
    """
    info = check_encoding(encoding, ["additive"], "heatmap")
    check_size("dim", dim, minimum=2)
    check_size("positions", positions)
    torch.manual_seed(0)  # learned tables: the same initialisation every time
    enc = registry.create(encoding, dim=dim)
    assert isinstance(enc, AdditiveEncoding)
    with torch.no_grad():
        matrix = enc.encode(torch.arange(positions)).float().numpy()  # [positions, dim]
    state = " (at initialisation)" if info.trainable else ""
    fig, (ax,) = new_figure(1, f"{encoding} encoding{state}: dim {dim}, {positions} positions")
    image = ax.imshow(matrix, aspect="auto", origin="upper", cmap="RdBu_r", interpolation="none")
    ax.set_xlabel("embedding dimension i")
    ax.set_ylabel("position (token index)")
    fig.colorbar(image, ax=ax, label="encoding value PE(position, i)")
    return fig
