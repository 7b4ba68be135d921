"""The score bias of a bias encoding, one ``[L, L]`` image per head.

Bias encodings add ``b_h(i, j)`` to the attention score of query ``i`` and key ``j`` in head
``h``: ALiBi's fixed slopes times the distance (Press et al. 2022, arXiv:2108.12409), T5's
learned scalar per log-spaced distance bucket (Raffel et al. 2020, arXiv:1910.10683), KERPLE's
kernels (Chi et al. 2022, arXiv:2205.09921), FIRE's MLP of the normalised distance (Li et al.
2023, arXiv:2310.04418) and Shaw's ``q_i · a^K[clip(j - i)]`` (Shaw et al. 2018,
arXiv:1803.02155). Drawn per head on one colour scale, the heads' different reaches show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch

from .. import registry
from ..base import BiasEncoding, InputBias, ScoreBias
from ..bias.cope import CoPE
from ..bias.fox import Fox
from .common import check_encoding, check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["SHAW_HEAD_DIM", "bias"]

#: the head size of the Shaw tables and of the fixed random queries its bias is drawn for
SHAW_HEAD_DIM = 16
#: the input width of the forget gates FoX's heatmap reads (a fixed random input)
FOX_DIM = 16


def bias(
    encoding: str = "alibi",
    n_heads: int = 8,
    length: int = 32,
    heads: Sequence[int] | None = None,
) -> Figure:
    """The bias ``enc.bias(arange(length), arange(length))`` of a bias encoding, a panel per head.

    Learned encodings (``t5``, ``kerple``, ``fire``, ``shaw``) are drawn at their
    initialisation (seed 0; the title says so): T5's table starts at zero, so its panels are
    flat. Shaw's bias depends on the queries: it is drawn for fixed random queries (seed 0,
    head size :data:`SHAW_HEAD_DIM`; CoPE's for fixed random queries and keys, its vectors at
    zero at initialisation, and over keys at or before their query, the ones it counts);
    FoX's depends on the layer's input: it is drawn for a
    fixed random input (seed 0, width :data:`FOX_DIM`), and only its lower triangle, since
    it is defined for keys at or before their query. Otherwise the whole ``[L, L]`` matrix
    is shown; a causal model uses its lower triangle (keys at or before the query) only.

    Args:
        encoding: the name of a bias encoding (``alibi``, ``t5``, ``kerple``, ``fire``,
            ``shaw``, ``cope``, ``fox``).
        n_heads: the encoding's number of heads.
        length: the sequence length ``L`` (queries and keys at positions ``0 .. L-1``).
        heads: which heads to draw (indices in ``0 .. n_heads-1``); all heads if omitted.

    Shapes:
        each panel's image: ``[length, length]``, rows = query position, columns = key position

    Returns:
        The figure: a grid of panels titled ``head h``, each with the image of that head's
        bias, and one colour bar shared by all (one colour scale).

    Raises:
        ValueError: for a bad value (naming the parameter) or an encoding that is not a bias
            encoding.
    """
    info = check_encoding(encoding, ["bias"], "bias")
    check_size("n_heads", n_heads)
    check_size("length", length)
    chosen = _check_heads(heads, n_heads)
    matrix = bias_matrix(encoding, n_heads, length)  # [n_heads, L, L]

    cols = min(len(chosen), 4)
    rows = math.ceil(len(chosen) / cols)
    state = " (learned: at initialisation)" if info.trainable else ""
    title = f"{encoding} score bias{state}: {n_heads} heads, length {length}"
    fig, (first,) = new_figure(1, title, width=2.6 * cols + 1.0, height=2.6 * rows + 0.6)
    first.remove()
    grid = fig.subplots(rows, cols, squeeze=False)
    shown = matrix[chosen][~matrix[chosen].isnan()]  # FoX leaves later keys blank
    low, high = float(shown.min()), float(shown.max())
    if low == high:  # a flat bias (T5 at initialisation): a visible, centred scale
        low, high = low - 1.0, high + 1.0
    images = []
    for n, ax in enumerate(grid.flat):
        if n >= len(chosen):
            ax.set_visible(False)
            continue
        h = chosen[n]
        image = ax.imshow(
            matrix[h].numpy(),
            cmap="viridis",
            vmin=low,
            vmax=high,
            origin="upper",
            interpolation="none",
        )
        images.append(image)
        ax.set_title(f"head {h}")
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position i")
    fig.colorbar(images[0], ax=grid.ravel().tolist(), label="bias added to the score q·k")
    return fig


def bias_matrix(encoding: str, n_heads: int, length: int) -> torch.Tensor:
    """The bias of encoding ``encoding`` for positions ``0 .. length-1``, seed 0.

    Returns:
        ``[n_heads, length, length]`` float32 on the CPU.
    """
    torch.manual_seed(0)  # learned encodings: the same initialisation every time
    config = {
        "shaw": {"head_dim": SHAW_HEAD_DIM},
        "cope": {"head_dim": SHAW_HEAD_DIM},
        "fox": {"dim": FOX_DIM},
    }.get(encoding, {})
    enc = registry.create(encoding, n_heads=n_heads, **config)
    assert isinstance(enc, BiasEncoding)
    positions = torch.arange(length)
    with torch.no_grad():
        if isinstance(enc, InputBias):  # FoX
            out = input_bias(cast(Fox, enc), length)
        elif enc.needs_q:  # Shaw, CoPE: the bias of fixed random queries (and keys)
            generator = torch.Generator().manual_seed(0)
            q = torch.randn(1, n_heads, length, SHAW_HEAD_DIM, generator=generator)
            if isinstance(enc, ScoreBias):
                k = torch.randn(q.shape, generator=generator)
                out = cast(CoPE, enc).bias(positions, positions, q=q, k=k)[0]  # [n_heads, L, L]
            else:
                out = enc.bias(positions, positions, q=q)[0]
            if isinstance(enc, ScoreBias):  # CoPE counts the keys at or before its query only
                out = out.masked_fill(torch.ones_like(out, dtype=torch.bool).triu(1), math.nan)
        else:
            out = enc.bias(positions, positions)  # [n_heads, L, L]
    return out.float()


def input_bias(enc: Fox, length: int) -> torch.Tensor:
    """The bias of an encoding that reads the layer's input (FoX's forget gates) for a
    fixed random input (seed 0), over keys at or before their query (NaN elsewhere: it
    defines no bias for later keys).

    Returns:
        ``[n_heads, length, length]`` float32 on the CPU.
    """
    x = torch.randn(1, length, enc.dim, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(length)
    with torch.no_grad():
        out = enc.bias(positions, positions, x=x)[0]
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    return out.masked_fill(future, float("nan")).float()


def _check_heads(heads: Sequence[int] | None, n_heads: int) -> list[int]:
    """The head indices to draw; ``ValueError`` naming ``heads`` for a bad one."""
    if heads is None:
        return list(range(n_heads))
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence) or not heads:
        raise ValueError(f"heads must be a non-empty sequence of head indices, got {heads!r}")
    for h in heads:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < n_heads:
            raise ValueError(f"heads must be ints in [0, {n_heads - 1}], got {h!r}")
    return list(heads)
