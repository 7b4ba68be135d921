"""The attention pattern of a trained model on a text, per layer and head.

What each head of a trained byte-level :class:`~posenc.models.TransformerLM` attends to,
read out by :func:`posenc.models.attention_maps` (the probabilities each layer computed):
one ``[seq, seq]`` image per layer and head, rows the queries and columns the keys, both
labelled with the text's characters. RoPE heads that attend to the previous few bytes,
ALiBi's recency (Press et al. 2022, arXiv:2108.12409), heads that always look at the first
token (the "attention sink", Xiao et al. 2023, arXiv:2309.17453) show at a glance.

The figure takes the model itself; whoever holds an arena run loads it first
(:func:`posenc.arena.load_model`), as ``posenc plot attention --run RUN`` does.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import torch

from ..models import TransformerLM, attention_maps
from ..positions import PositionOutOfRangeError
from .common import check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["DEFAULT_TEXT", "MAX_TICKS", "attention", "text_ids", "token_labels"]

#: at most this many tick labels per axis (every k-th token past it)
MAX_TICKS = 48

#: the text drawn when none is given: a small Python function
DEFAULT_TEXT = "def add(a, b):\n    return a + b\n"
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", " ": "␣"}


def attention(
    model: TransformerLM | None = None,
    text: str = DEFAULT_TEXT,
    layer: int | None = None,
    head: int | None = None,
    label: str | None = None,
) -> Figure:
    """The attention probabilities of a trained byte-level model on ``text``, per layer
    and head.

    ``text`` becomes the model's byte ids (one token per UTF-8 byte, :func:`text_ids`).
    Every image is drawn on one colour scale, from 0 to the largest probability shown. In
    a causal model the upper triangle (future keys) is 0.

    Args:
        model: the trained :class:`~posenc.models.TransformerLM` (required; one of an arena
            run: ``posenc.arena.load_model(run, "rope")``).
        text: the text the model reads (non-empty; one token per UTF-8 byte, at most as
            many as the model's positions reach).
        layer: draw only this layer (0-based); all layers if omitted.
        head: draw only this head (0-based); all heads if omitted.
        label: what the model is, in the title (default: its encoding and whether it is
            causal or bidirectional).

    Shapes:
        each panel's image: ``[seq, seq]``, rows = query token, columns = key token.

    Returns:
        The figure: rows = layers, columns = heads, each panel titled ``layer l, head h``
        with the tokens as tick labels (newline as ``\\n``, space as ``␣``), and one colour
        bar of the attention probability.

    Raises:
        ValueError: naming the parameter: no ``model`` (or not a ``TransformerLM``), an
            empty text or one longer than the model reaches, a layer or head out of range.
    """
    if model is None:
        raise ValueError(
            "model: pass model=... (a trained TransformerLM, e.g. posenc.arena.load_model("
            "run, 'rope') of an arena run: `posenc arena run extrapolation --preset quick "
            "--out DIR` makes one)"
        )
    if not isinstance(model, TransformerLM):
        raise ValueError(f"model must be a TransformerLM, got {type(model).__name__}")
    ids = text_ids(text)  # raises for an empty text
    encoding = model.encoding.info.name
    layers = _pick("layer", layer, model.n_layers)
    heads = _pick("head", head, model.n_heads)
    try:
        maps = attention_maps(model, ids)[:, 0]  # [n_layers, n_heads, seq, seq]
    except PositionOutOfRangeError as e:
        raise ValueError(
            f"text: {ids.shape[1]} bytes, but the {encoding} model reaches {e.limit} "
            "positions: pass a shorter text"
        ) from e
    shown = maps[layers][:, heads]  # [rows, cols, seq, seq]
    if label is None:
        label = f"{encoding} {'causal' if model.causal else 'bidirectional'}"
    return _draw(shown, layers, heads, token_labels(text), label)


def text_ids(text: str) -> torch.Tensor:
    """The token ids of ``text`` for a byte-level model: its UTF-8 bytes (ids 0..255).

    Args:
        text: a non-empty string.

    Returns:
        ``[1, n_bytes]`` int64.

    Example:
        >>> text_ids("hé")
        tensor([[104, 195, 169]])
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"text must be a non-empty string, got {text!r}")
    return torch.tensor([list(text.encode("utf-8"))], dtype=torch.long)


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
