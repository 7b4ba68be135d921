"""Figures of positions on an image grid and in a multimodal sequence.

- :func:`grid`: for the 2-D encodings of image patches (``sincos_2d``, He et al. 2021, MAE,
  arXiv:2111.06377; ``learned_2d``, Dosovitskiy et al. 2020, ViT, arXiv:2010.11929;
  ``rope_2d`` and ``rope_mixed``, Heo et al. 2024, arXiv:2403.13298), the similarity of one
  patch to every patch, drawn on the grid (measured as in :mod:`posenc.plot.similarity`).
- :func:`mrope_ids`: the (temporal, height, width) ids M-RoPE gives a sequence of text, an
  image and a video (Wang et al. 2024, Qwen2-VL, arXiv:2409.12191), from
  :func:`posenc.positions.multimodal`.

matplotlib (the ``plot`` extra) is imported only when a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..positions import grid as grid_positions
from ..positions import multimodal
from ..registry import available, get
from .common import check_size, new_figure
from .similarity import MEASURES, make_encoding, scores

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["grid", "mrope_ids"]

#: token ids of the sequence :func:`mrope_ids` builds (any distinct ids would do)
TEXT_ID, IMAGE_ID, VIDEO_ID = 1, 2, 3


def grid_encodings() -> list[str]:
    """The registered encodings that take (row, column) coordinates."""
    return [name for name in available() if get(name).position_axes == 2]


def _sizes(name: str, value: Any, n: int, minimum: int = 1) -> tuple[int, ...]:
    """``value`` as a tuple of ``n`` ints >= ``minimum``, else an error naming ``name``."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != n:
        raise ValueError(f"{name} must be a tuple of {n} ints, got {value!r}")
    for i, item in enumerate(value):
        check_size(f"{name}[{i}]", item, minimum=minimum)
    return tuple(value)


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
    h, w = _sizes("grid", grid, 2)
    row, col = _sizes("patch", patch, 2, minimum=0)
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


def sequence(
    text: int, image: tuple[int, int], video: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The token ids of ``text`` text tokens, an ``image`` ``(h, w)`` of tokens, a ``video``
    ``(t, h, w)`` of tokens and ``text`` text tokens again, and their M-RoPE ids.

    Returns:
        ``(input_ids [seq], position_ids [3, seq])`` (one token per merged patch:
        ``spatial_merge_size=1``).
    """
    check_size("text", text, minimum=0)
    ih, iw = _sizes("image", image, 2)
    vt, vh, vw = _sizes("video", video, 3)
    ids = torch.tensor(
        [TEXT_ID] * text + [IMAGE_ID] * (ih * iw) + [VIDEO_ID] * (vt * vh * vw) + [TEXT_ID] * text
    )
    positions, _ = multimodal(
        ids[None],
        image_grid_thw=torch.tensor([[1, ih, iw]]),
        video_grid_thw=torch.tensor([[vt, vh, vw]]),
        image_token_id=IMAGE_ID,
        video_token_id=VIDEO_ID,
        spatial_merge_size=1,
    )
    return ids, positions[:, 0]


def mrope_ids(
    text: int = 4, image: tuple[int, int] = (2, 3), video: tuple[int, int, int] = (2, 2, 2)
) -> Figure:
    """The M-RoPE (t, h, w) ids of text, an image, a video and text again, as three rows.

    Text advances all three ids together; an image's or video's tokens share a start and
    spread over rows and columns (and frames); text after them resumes past the largest id.

    Args:
        text: text tokens before the image and again after the video (>= 0).
        image: ``(h, w)`` tokens of the image (merged patches).
        video: ``(t, h, w)`` frames and tokens of the video.

    Returns:
        a matplotlib ``Figure`` with one ``[3, seq]`` image of the ids (rows t, h, w), each
        cell labelled with its id when the sequence is short, and the spans marked.

    Raises:
        ValueError, TypeError: naming the parameter.
    """

    from matplotlib.ticker import MaxNLocator

    ids, positions = sequence(text, image, video)
    seq = ids.numel()
    fig, axes = new_figure(
        1, title="M-RoPE (t, h, w) position ids: text, image, video, text", width=7.0, height=3.2
    )
    ax = axes[0]
    data = positions.numpy()
    picture = ax.imshow(data, cmap="viridis", aspect="auto", interpolation="nearest")
    ax.set_yticks([0, 1, 2], ["t", "h", "w"])
    ax.set_ylabel("axis of the id")
    ax.set_xlabel("token index (tokens)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if seq <= 48:
        middle = (data.max() + data.min()) / 2
        for axis in range(3):
            for i in range(seq):
                value = int(data[axis, i])
                colour = "black" if value > middle else "white"
                ax.text(i, axis, str(value), ha="center", va="center", fontsize=7, color=colour)
    starts = (0, text, text + image[0] * image[1], seq - text)
    names = ("text", "image", "video", "text")
    for start, end, name in zip(starts, (*starts[1:], seq), names, strict=True):
        if end > start:
            ax.axvline(start - 0.5, color="white", linewidth=2)
            ax.text((start + end - 1) / 2, -0.75, name, ha="center", va="bottom", fontsize=8)
    fig.colorbar(picture, ax=ax, label="position id")
    return fig
