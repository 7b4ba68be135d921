"""The article's figures, one module each, listed in :data:`PLOTS`.

=============  ==============================================================================
name           what it shows
=============  ==============================================================================
permutation    attention outputs of a sentence and of its shuffle, without and with positions
heatmap        the encoding matrix of an additive encoding (dimension x position)
rotation       one 2-D pair of a vector under sinusoidal addition and under RoPE rotation
bias           the score bias of a bias encoding, one ``[Lq, Lk]`` image per head
decay          RoPE's long-term decay bound against relative distance, per base and scaling
frequencies    the wavelength of each rotary pair under each context-extension scaling
similarity     the similarity of the encodings of every pair of positions
grid           the similarity of one patch to every other on the grid of a 2-D encoding
mrope-ids      the (t, h, w) ids of text, an image and a video (M-RoPE), with audio (TMRoPE)
attention      a trained arena model's attention on a text, one image per layer and head
=============  ==============================================================================

Each function takes keyword arguments with defaults (``posenc.plot.get("heatmap")()`` runs)
and returns a :class:`matplotlib.figure.Figure`; :func:`save` writes it as PNG or SVG.
matplotlib is the ``plot`` extra (``pip install 'posenc[plot]'``): a module is imported on
first use, so ``import posenc.plot`` does not import matplotlib. Adding a figure: its module
here and one line in :data:`PLOTS`. On the command line: ``posenc plot KIND --out FILE``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PLOTS", "get", "save"]

#: figure name -> its module in this package; the module's function has the figure's name
#: (``mrope-ids`` -> ``multimodal.mrope_ids``)
PLOTS: dict[str, str] = {
    "permutation": "permutation",
    "heatmap": "heatmap",
    "rotation": "rotation",
    "bias": "bias",
    "decay": "decay",
    "frequencies": "frequencies",
    "similarity": "similarity",
    "grid": "grid",
    "mrope-ids": "multimodal",
    "attention": "attention",
}


def get(name: str) -> Callable[..., Figure]:
    """The function that draws figure ``name`` (a key of :data:`PLOTS`).

    Args:
        name: the figure's name, e.g. ``"heatmap"``.

    Returns:
        The figure's function: keyword arguments in, a ``Figure`` out.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in PLOTS:
        raise ValueError(f"unknown figure {name!r}; choose from {list(PLOTS)}")
    module = importlib.import_module(f"{__name__}.{PLOTS[name]}")
    draw: Callable[..., Figure] = getattr(module, name.replace("-", "_"))
    return draw


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG or SVG by the suffix of ``path`` (see :func:`.common.save`)."""
    from .common import save as save_figure

    return save_figure(fig, path)
