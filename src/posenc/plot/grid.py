"""The figure of positions on an image grid: :func:`grid`.

For the 2-D encodings of image patches (``sincos_2d``, He et al. 2021, MAE,
arXiv:2111.06377; ``learned_2d``, Dosovitskiy et al. 2020, ViT, arXiv:2010.11929;
``rope_2d`` and ``rope_mixed``, Heo et al. 2024, arXiv:2403.13298), the similarity of one
patch to every patch, drawn on the grid (measured as in :mod:`posenc.plot.similarity`).

matplotlib (the ``plot`` extra) is imported only when a figure is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..positions import grid as grid_positions
from ..registry import available, get
from .common import check_sizes, new_figure
from .similarity import MEASURES, make_encoding, scores

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["grid"]


def grid_encodings() -> list[str]:
    """The registered encodings that take (row, column) coordinates."""
    return [name for name in available() if get(name).position_axes == 2]


def grid(
    encoding: str = "sincos_2d",
    grid: tuple[int, int] = (8, 8),
    patch: tuple[int, int] = (3, 4),
    dim: int = 64,
) -> Figure:
    """The similarity of one patch to every patch of an image grid, drawn on the grid.

    Args:
        encoding: a 2-D encoding: ``sincos_2d``, ``learned_2d`` (at its seeded
            initialisation), ``rope_2d`` or ``rope_mixed`` (head 0).
        grid: ``(h, w)``, the grid's rows and columns of patches.
        patch: ``(row, col)`` of the patch compared with the others, inside the grid.
        dim: the encoding's size (``dim`` additive, ``head_dim`` rotary).

    Returns:
        a matplotlib ``Figure`` with one ``[h, w]`` image (entry (r, c): the similarity of
        ``patch`` to patch (r, c)), the patch marked, and a colour bar.

    Raises:
        ValueError: naming the parameter; for an encoding that is not a 2-D one, saying
            which ones the figure takes.
    """

    kinds = grid_encodings()
    if encoding not in kinds:
        raise ValueError(f"grid takes the 2-D encodings {kinds}, got encoding={encoding!r}")
    h, w = check_sizes("grid", grid, 2)
    row, col = check_sizes("patch", patch, 2, minimum=0)
    if not (row < h and col < w):
        raise ValueError(f"patch must be inside the grid {(h, w)}, got {tuple(patch)}")
    enc = make_encoding(encoding, dim, grid=(h, w))
    pos = grid_positions(h, w)  # [h * w, 2], row-major
    data = scores(enc, pos[row * w + col : row * w + col + 1], pos)[0].reshape(h, w)
    fig, axes = new_figure(1, title=f"{encoding}: similarity of patch {(row, col)} to each patch")
    ax = axes[0]
    image = ax.imshow(data.numpy(), cmap="viridis", origin="upper", interpolation="nearest")
    ax.plot([col], [row], marker="x", color="red", markersize=10, label=f"patch {(row, col)}")
    ax.legend(loc="upper right", fontsize="small")
    ax.set_xlabel("patch column (patches)")
    ax.set_ylabel("patch row (patches)")
    fig.colorbar(image, ax=ax, label=MEASURES[enc.kind])
    return fig
