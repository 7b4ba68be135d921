"""The ``similarity`` figure: how alike the encodings of every pair of positions are.

One image, ``[positions, positions]``, whose entry ``(i, j)`` says how position ``i`` sees
position ``j`` under the encoding, measured in the way its kind acts on attention:

- additive (Vaswani et al. 2017, arXiv:1706.03762, and the others): the cosine of
  ``encode(i)`` and ``encode(j)``;
- rotary (Su et al. 2021, RoFormer, arXiv:2104.09864, and its variants): the relative score
  ``q_i · k_j / (|q| |k|)`` of one fixed query and key (all ones) rotated to positions
  ``i`` and ``j``: for RoPE a function of ``j - i`` only, the long-term decay along the
  diagonals;
- bias (ALiBi, T5, KERPLE, FIRE, Shaw, FoX): the score bias of head 0, learned ones at
  their initialisation (a table that starts at zero, T5's and CoPE's, with a random one:
  :func:`posenc.plot.bias.zero_start`; Shaw's, which depends on the query, for the same
  fixed query; CoPE's, which depends on the scores, for the same fixed queries and keys;
  FoX's, which depends on the layer's input, for a fixed random input), over keys
  ``j <= i`` only (NaN elsewhere) where the encoding's form is causal
  (:func:`posenc.plot.bias.causal_only`: ALiBi, T5, CoPE, FoX);
- PaTH (Yang et al. 2025, arXiv:2505.16381): its scores of unit queries and keys, all
  alike, through the transforms of a fixed random input: what the tokens between them do;
- stick-breaking (Tan et al. 2025, arXiv:2410.17980), which adds no bias: its weights for
  the same unit queries and keys, every key's share ``σ(q·k·scale)`` equal, so the figure
  is its built-in recency, ``β (1 − β)^(i − j − 1)``;
- ``nope``: 1 everywhere, since without an encoding every position looks the same.

Encodings of image grids (``sincos_2d``, ``learned_2d``, ``rope_2d``, ``rope_mixed``) are
read along one row of patches, ``(0, i)``, and ``rope_3d`` along time, ``(i, 0, 0)``;
:func:`posenc.plot.grid.grid` shows the image ones on the whole grid. :func:`scores`
computes the matrix and is shared with that figure.

matplotlib (the ``plot`` extra) is imported only when a figure is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F

from ..base import (
    AdditiveEncoding,
    BiasEncoding,
    Encoding,
    InputBias,
    InputTransforms,
    RotaryEncoding,
    ScoreBias,
    ScoreWeights,
)
from ..bias.cope import CoPE
from ..bias.fox import Fox
from ..bias.path import Path
from ..bias.stick_breaking import StickBreaking
from ..builder import build
from ..functional.path import path_scores
from ..positions import grid as grid_positions
from ..registry import available, get
from .bias import causal_only, init_note, input_bias, zero_start
from .common import check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["similarity"]

#: heads of the bias and multi-head rotary encodings built for the figures (ALiBi's head 0
#: then has slope 1/2, visible over a few dozen positions)
N_HEADS = 8
#: the size of the unit queries and keys stick-breaking's weights are drawn for: each
#: score is then 1/4, each key's share σ(1/4)
UNIT_DIM = 16
#: what the colour bar measures, by kind
MEASURES = {
    "additive": "cosine similarity of encode(i) and encode(j)",
    "rotary": "q_i · k_j / (|q| |k|), q = k = ones",
    "bias": "score bias of head 0",
    "none": "similarity (no encoding: all 1)",
}
#: what it measures for a bias encoding whose weights replace the softmax (stick-breaking)
WEIGHT = "attention weight of head 0, q = k = ones"


def check_encoding(encoding: Any) -> None:
    """Raise ``ValueError`` naming ``encoding`` unless it is a registered name."""
    if not isinstance(encoding, str) or encoding not in available():
        raise ValueError(f"encoding must be one of {available()}, got {encoding!r}")


def make_encoding(encoding: Any, dim: int, **config: Any) -> Encoding:
    """The encoding registered as ``encoding``, built at size ``dim`` (``dim`` of additive
    ones, ``head_dim`` of rotary ones and Shaw, :data:`N_HEADS` heads), with its random
    initialisation seeded (0) so that a figure is the same on every call.

    Raises:
        ValueError: naming ``encoding`` when it is not a registered name.
    """
    check_encoding(encoding)
    check_size("dim", dim)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build(encoding, dim=dim, head_dim=dim, n_heads=N_HEADS, **config)


def scores(enc: Encoding, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """The similarity of each query position to each key position under ``enc``.

    Args:
        enc: any encoding (the module docstring says what is measured for each kind).
        q_positions, k_positions: the positions the encoding takes, ``[n]`` or ``[n, 2]``.

    Returns:
        ``[n_q, n_k]`` float32 on the CPU.
    """
    n_q, n_k = len(q_positions), len(k_positions)
    with torch.no_grad():
        if isinstance(enc, AdditiveEncoding):
            eq = F.normalize(enc.encode(q_positions).float(), dim=-1)
            ek = F.normalize(enc.encode(k_positions).float(), dim=-1)
            out = eq @ ek.T  # [n_q, n_k]
        elif isinstance(enc, RotaryEncoding):
            heads = getattr(enc.config, "n_heads", 1)
            unit = torch.full((enc.head_dim,), enc.head_dim**-0.5)  # |q| = |k| = 1
            q = unit.expand(1, heads, n_q, -1).contiguous()  # [1, heads, n_q, head_dim]
            k = unit.expand(1, heads, n_k, -1).contiguous()
            q, k = enc(q, k, positions=q_positions, k_positions=k_positions)
            out = (q[0, 0] @ k[0, 0].T).float()
        elif isinstance(enc, InputBias):
            out = input_bias(cast(Fox, enc), n_k)[0, n_k - n_q :]  # FoX: the tokens, not positions
        elif isinstance(enc, InputTransforms):  # PaTH: unit q, k through a random input's
            out = transformed_scores(cast(Path, enc), n_q, n_k)
        elif isinstance(enc, BiasEncoding):
            # stick-breaking's weights take queries of any size: one of UNIT_DIM
            default = UNIT_DIM if isinstance(enc, ScoreWeights) else None
            head_dim = getattr(enc.config, "head_dim", default)
            q = None
            k = None
            if enc.needs_q and head_dim is not None:
                unit = torch.full((head_dim,), head_dim**-0.5)
                q = unit.expand(1, enc.n_heads, n_q, -1).contiguous()
                k = unit.expand(1, enc.n_heads, n_k, -1).contiguous()
            if isinstance(enc, ScoreWeights):  # stick-breaking: its weights, same q and k
                bias = cast(StickBreaking, enc).weights(q_positions, k_positions, q=q, k=k)
            elif isinstance(enc, ScoreBias):  # CoPE counts with the same fixed keys
                bias = cast(CoPE, enc).bias(q_positions, k_positions, q=q, k=k)
            else:
                bias = enc.bias(q_positions, k_positions, q=q)
            out = (bias[0, 0] if bias.dim() == 4 else bias[0]).float()
            if causal_only(enc):  # meant for the keys a causal query sees: j <= i
                future = torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q + 1)
                out = out.masked_fill(future, float("nan"))
        else:  # nope: no position information, every pair alike
            out = torch.ones(n_q, n_k)
    return out.detach().cpu()


def transformed_scores(enc: Path, n_q: int, n_k: int) -> torch.Tensor:
    """PaTH's scores ``q_iᵀ H_i ··· H_{j+1} k_j`` of unit queries and keys (all alike, so
    only the transforms between them tell the tokens apart) through the transforms of a
    fixed random input (seed 0), head 0, over keys ``j <= i`` (NaN elsewhere).

    Returns:
        ``[n_q, n_k]`` float32.
    """
    x = torch.randn(1, n_k, enc.dim, generator=torch.Generator().manual_seed(0))
    unit = torch.full((enc.head_dim,), enc.head_dim**-0.5)  # |q| = |k| = 1
    q = unit.expand(1, enc.n_heads, n_q, -1)
    k = unit.expand(1, enc.kv_heads, n_k, -1)
    out = path_scores(q, k, enc.transforms(x))[0, 0].float()
    future = torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q + 1)
    return out.masked_fill(future, float("nan"))


def similarity(encoding: str = "sinusoidal", positions: int = 64, dim: int = 64) -> Figure:
    """The similarity of the encodings of every pair of positions, as an image.

    Args:
        encoding: any registered encoding name.
        positions: how many positions, ``0 .. positions - 1``.
        dim: the encoding's size (``dim`` of additive encodings, ``head_dim`` of rotary
            ones and of Shaw's).

    Returns:
        a matplotlib ``Figure`` with one image ``[positions, positions]`` (row i = query
        position, column j = key position) and a colour bar.

    Raises:
        ValueError: naming the parameter (an unknown encoding, a size the encoding does
            not accept); TypeError for a value of the wrong type; ImportError without
            matplotlib.
    """

    check_encoding(encoding)
    check_size("positions", positions)
    on_grid = get(encoding).position_axes == 2
    config: dict[str, Any] = {"grid": (1, positions)} if on_grid else {}
    if get(encoding).kind == "bias":
        config.update(zero_start(encoding))  # a table at zero: drawn random, not blank
    enc = make_encoding(encoding, dim, **config)
    if enc.position_axes == 2:
        pos = grid_positions(1, positions)  # one row of patches, (0, i)
        axis = "patch column i (row 0)"
    elif enc.position_axes == 3:  # video latents (rope_3d): along time, (i, 0, 0)
        pos = torch.zeros(positions, 3, dtype=torch.long)
        pos[:, 0] = torch.arange(positions)
        axis = "frame t (h = w = 0)"
    else:
        pos = torch.arange(positions)
        axis = "position"
    data = scores(enc, pos, pos).numpy()
    kind = enc.kind
    title = f"{encoding}: similarity of positions i and j"
    if kind == "bias" and enc.info.trainable:
        title += f"\n{init_note(config)}"
    if kind == "bias" and causal_only(cast(BiasEncoding, enc)):
        title += "\nkeys after the query (j > i) blank: causal attention"
    fig, axes = new_figure(1, title=title)
    ax = axes[0]
    image = ax.imshow(data, cmap="viridis", origin="upper", interpolation="nearest")
    ax.set_xlabel(f"key {axis} j (tokens)" if enc.position_axes == 1 else f"key {axis}")
    ax.set_ylabel(f"query {axis} i (tokens)" if enc.position_axes == 1 else f"query {axis}")
    measure = WEIGHT if isinstance(enc, ScoreWeights) else MEASURES[kind]
    fig.colorbar(image, ax=ax, label=measure)
    return fig
