"""The attention pattern of a trained arena model on a text, per layer and head.

What each head of a trained byte-level :class:`~posenc.models.TransformerLM` attends to,
read out by :func:`posenc.models.attention_maps` (the probabilities each layer computed):
one ``[seq, seq]`` image per layer and head, rows the queries and columns the keys, both
labelled with the text's characters. RoPE heads that attend to the previous few bytes,
ALiBi's recency (Press et al. 2022, arXiv:2108.12409), heads that always look at the first
token (the "attention sink", Xiao et al. 2023, arXiv:2309.17453) show at a glance.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import TYPE_CHECKING

import torch

from ..arena.models import load_model, text_ids
from ..models import attention_maps
from ..positions import PositionOutOfRangeError
from .common import check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MAX_TICKS", "attention", "token_labels"]

#: at most this many tick labels per axis (every k-th token past it)
MAX_TICKS = 48

_DEFAULT_TEXT = "def add(a, b):\n    return a + b\n"
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", " ": "␣"}


def attention(
    run: str | None = None,
    encoding: str = "rope",
    text: str = _DEFAULT_TEXT,
    layer: int | None = None,
    head: int | None = None,
    model: str = "lm",
    seed: int | None = None,
) -> Figure:
    """The attention probabilities of a trained arena model on ``text``, per layer and head.

    The model is loaded from the arena run ``run`` (:func:`posenc.arena.models.load_model`);
    ``text`` becomes its byte ids (one token per UTF-8 byte). Every image is drawn on one
    colour scale, from 0 to the largest probability shown. In a causal model the upper
    triangle (future keys) is 0.

    Args:
        run: the arena run directory that holds the trained model (required:
            ``posenc arena run extrapolation --preset quick --out DIR`` makes one).
        encoding: the encoding of the model to load, one the run trained (e.g. ``rope``).
        text: the text the model reads (non-empty; one token per UTF-8 byte, at most as
            many as the model's positions reach).
        layer: draw only this layer (0-based); all layers if omitted.
        head: draw only this head (0-based); all heads if omitted.
        model: ``lm`` (the causal language model) or ``mlm`` (the bidirectional masked
            one of ``nope-needs-causality``).
        seed: the training seed of the model; the run's first seed if omitted.

    Shapes:
        each panel's image: ``[seq, seq]``, rows = query token, columns = key token.

    Returns:
        The figure: rows = layers, columns = heads, each panel titled ``layer l, head h``
        with the tokens as tick labels (newline as ``\\n``, space as ``␣``), and one colour
        bar of the attention probability.

    Raises:
        ValueError: naming the parameter: no ``run``, an encoding or seed the run has no
            model for (listing those it has), an empty text or one longer than the model
            reaches, a layer or head out of range.

    Example:
        ``posenc plot attention --run runs/arena-quick --encoding rope --layer 0
        --out attention.png``
    """
    if run is None:
        raise ValueError(
            "run: pass run=... (an arena run directory): `posenc arena run extrapolation "
            "--preset quick --out DIR` makes one"
        )
    if not isinstance(run, (str, os.PathLike)):
        raise ValueError(f"run must be a path to an arena run directory, got {run!r}")
    run = os.fspath(run)  # a pathlib.Path too, from a notebook
    ids = text_ids(text)  # raises for an empty text
    net = load_model(run, encoding, model=model, seed=seed)
    layers = _pick("layer", layer, net.n_layers)
    heads = _pick("head", head, net.n_heads)
    try:
        maps = attention_maps(net, ids)[:, 0]  # [n_layers, n_heads, seq, seq]
    except PositionOutOfRangeError as e:
        raise ValueError(
            f"text: {ids.shape[1]} bytes, but the {encoding} model reaches {e.limit} "
            "positions: pass a shorter text"
        ) from e
    shown = maps[layers][:, heads]  # [rows, cols, seq, seq]
    labels = token_labels(text)
    return _draw(shown, layers, heads, labels, f"{encoding} {model}, {_title_run(run)}")


def token_labels(text: str) -> list[str]:
    """A tick label for each byte of ``text`` (each token of the arena's models): the
    character on its first byte, ``\\n``/``\\t``/``\\r`` for those control characters,
    ``␣`` for a space, ``\\xNN`` for the further bytes of a multi-byte UTF-8 character and
    for other control characters.

    Example:
        >>> token_labels("a é\\n")
        ['a', '␣', 'é', '\\\\xa9', '\\\\n']
    """
    labels = []
    for char in text:
        data = char.encode("utf-8")
        if char in _ESCAPES:
            first = _ESCAPES[char]
        elif char.isprintable():
            first = char
        else:
            first = f"\\x{data[0]:02x}"
        labels += [first, *(f"\\x{b:02x}" for b in data[1:])]
    return labels


def _pick(name: str, value: int | None, count: int) -> list[int]:
    """``[value]`` checked against ``count``, or every index when None."""
    if value is None:
        return list(range(count))
    check_size(name, value, minimum=0)
    if value >= count:
        raise ValueError(f"{name} must be in [0, {count - 1}] (the model has {count}), got {value}")
    return [value]


def _title_run(run: str) -> str:
    name = run.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return f"run {name or run}"


def _draw(
    maps: torch.Tensor, layers: list[int], heads: list[int], labels: list[str], what: str
) -> Figure:
    """The grid of images ``maps[r, c]`` (``[rows, cols, seq, seq]``), one colour scale."""
    rows, cols, seq = len(layers), len(heads), maps.shape[-1]
    side = max(2.8, 0.14 * seq)  # a panel's size in inches: room for one label per token
    title = f"attention probabilities: {what}, {seq} tokens (bytes)"
    fig, (first,) = new_figure(1, title, width=side * cols + 1.2, height=side * rows + 0.8)
    first.remove()
    grid = fig.subplots(rows, cols, squeeze=False)
    high = float(maps.max())
    step = math.ceil(seq / MAX_TICKS)
    ticks = list(range(0, seq, step))
    font = 7 if seq > 24 else 9
    upright = all(len(label) == 1 for label in labels)
    images = []
    for r, c in itertools.product(range(rows), range(cols)):
        ax = grid[r, c]
        images.append(
            ax.imshow(
                maps[r, c].cpu().numpy(),
                cmap="viridis",
                vmin=0.0,
                vmax=high if high > 0 else 1.0,
                origin="upper",
                interpolation="none",
            )
        )
        ax.set_title(f"layer {layers[r]}, head {heads[c]}")
        ax.set_xlabel("key (token)")
        ax.set_ylabel("query (token)")
        ax.set_xticks(
            ticks, [labels[i] for i in ticks], fontsize=font, rotation=0 if upright else 90
        )
        ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=font)
    fig.colorbar(images[0], ax=grid.ravel().tolist(), label="attention probability")
    return fig
