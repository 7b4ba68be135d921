"""The score bias of a bias encoding, one ``[L, L]`` image per head.

Bias encodings add ``b_h(i, j)`` to the attention score of query ``i`` and key ``j`` in head
``h``: ALiBi's fixed slopes times the distance (Press et al. 2022, arXiv:2108.12409), T5's
learned scalar per log-spaced distance bucket (Raffel et al. 2020, arXiv:1910.10683), KERPLE's
kernels (Chi et al. 2022, arXiv:2205.09921), FIRE's MLP of the normalised distance (Li et al.
2023, arXiv:2310.04418) and Shaw's ``q_i · a^K[clip(j - i)]`` (Shaw et al. 2018,
arXiv:1803.02155). Each head is drawn on its own colour scale, so that a head with a small
slope shows its structure beside one with a large slope.

What is drawn is decided by what an encoding declares, never by its name:

- keys after their query (``j > i``) are masked (NaN in the image, drawn hatched) when the
  encoding's form is the causal one (:func:`causal_only`): a :class:`~posenc.base.InputBias`
  or :class:`~posenc.base.ScoreBias` (FoX, CoPE: defined over earlier keys only), or a
  direction key of :data:`DIRECTION_KEYS` set to False (ALiBi's ``symmetric``, T5's
  ``bidirectional``, the defaults), whose bias for later keys only a causal mask makes
  sense of (ALiBi's ``-m (i - j)`` rewards far future keys);
- a learned table that starts at zero (an ``init_std`` key whose default is 0: T5, CoPE) is
  drawn with ``init_std`` = :data:`INIT_STD` instead (:func:`drawn_config`), so that its
  structure (T5's buckets) shows; the title says so.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from .. import registry
from ..base import BiasEncoding, InputBias, InputTransforms, LinearSlopes, ScoreBias, ScoreWeights
from ..bias.cope import CoPE
from ..bias.fox import Fox
from ..bias.path import Path
from ..bias.stick_breaking import StickBreaking
from ..config import check_bool
from .common import check_encoding, check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "DIRECTION_KEYS",
    "INIT_STD",
    "SHAW_HEAD_DIM",
    "bias",
    "bias_matrix",
    "causal_only",
    "drawn_config",
]

#: the head size of the Shaw tables and of the fixed random queries its bias is drawn for
SHAW_HEAD_DIM = 16
#: the input width of the forget gates FoX's heatmap reads (a fixed random input)
FOX_DIM = 16
#: the config keys by which a bias encoding declares its form for bidirectional attention
#: (ALiBi's ``symmetric``, T5's ``bidirectional``); False is the causal form
DIRECTION_KEYS = ("symmetric", "bidirectional")
#: the config key of a learned table's initial spread: a default of 0 starts it at zero
INIT_KEY = "init_std"
#: the ``init_std`` a table that starts at zero is drawn with (seed 0), so that it shows
INIT_STD = 1.0
#: what the figure of an encoding whose weights replace the softmax (stick-breaking) shows
WEIGHTS = "attention weights, in place of the softmax"
#: the seed of every random initialisation, query and input the figures draw
SEED = 0


def bias(
    encoding: str = "alibi",
    n_heads: int = 8,
    length: int = 32,
    heads: Sequence[int] | None = None,
    causal: bool | None = None,
) -> Figure:
    """The bias ``enc.bias(arange(length), arange(length))`` of a bias encoding, a panel per head.

    Each head has its own colour scale (its own colour bar). Learned encodings are drawn
    at their initialisation (seed 0; the title says so), except a table that starts at zero
    (T5, CoPE: ``init_std`` 0), drawn with ``init_std`` = :data:`INIT_STD`. Shaw's bias
    depends on the queries: it is drawn for fixed random queries (seed 0, head size
    :data:`SHAW_HEAD_DIM`; CoPE's for fixed random queries and keys). FoX's depends on the
    layer's input: it is drawn for a fixed random input (seed 0, width :data:`FOX_DIM`).
    Keys after their query are masked (hatched) where the encoding's form is causal
    (:func:`causal_only`: ALiBi, T5, CoPE, FoX by default); otherwise the whole matrix.
    Stick-breaking adds no bias: its weights, which replace the softmax, are drawn for the
    same fixed queries and keys as CoPE's; PaTH's is what its turns change in ``q·k``, for
    those queries and keys and a fixed random input.

    Args:
        encoding: the name of a bias encoding (``alibi``, ``t5``, ``kerple``, ``fire``,
            ``shaw``, ``cope``, ``fox``).
        n_heads: the encoding's number of heads.
        length: the sequence length ``L`` (queries and keys at positions ``0 .. L-1``).
        heads: which heads to draw (indices in ``0 .. n_heads-1``); all heads if omitted.
        causal: True masks keys after their query, as a causal model does, for any
            encoding; False draws the encoding's bidirectional form over all keys
            (ALiBi's ``symmetric``, T5's ``bidirectional`` buckets; an error for FoX and
            CoPE, defined over earlier keys only); if omitted, masked where the encoding's
            form is the causal one.

    Shapes:
        each panel's image: ``[length, length]``, rows = query position, columns = key position

    Returns:
        The figure: a grid of panels titled ``head h`` (``head h, m = slope`` for a linear
        bias, ALiBi's), each with the image of that head's bias (NaN where masked) and its
        own colour bar; the title says what was drawn (initialisation, masking).

    Raises:
        ValueError: for a bad value (naming the parameter), an encoding that is not a bias
            encoding, or ``causal=False`` for one defined over earlier keys only.
    """
    info = check_encoding(encoding, ["bias"], "bias")
    check_size("n_heads", n_heads)
    check_size("length", length)
    chosen = _check_heads(heads, n_heads)
    if causal is not None:
        check_bool("causal", causal)
    config = drawn_config(encoding, causal)
    enc = build_bias(encoding, n_heads, config)
    if causal is False and causal_only(enc):
        raise ValueError(
            f"causal=False: {encoding!r} defines its bias for keys at or before their query only"
        )
    masked = causal_only(enc) if causal is None else causal
    matrix = bias_matrix(enc, length, masked)[chosen]  # [len(chosen), L, L]

    notes = [_state(info.trainable, config, matrix)]
    notes += [f"{k}=True: bidirectional form" for k in config if k in DIRECTION_KEYS]
    if masked:
        notes.append("keys after the query (j > i) masked, hatched: causal attention")
    notes.append("each head on its own colour scale")
    cols = min(len(chosen), 4)
    rows = math.ceil(len(chosen) / cols)
    width = 3.1 * cols + 0.3
    chars = int(width * 11)  # about what a line of the title holds at this width
    title = textwrap.fill(
        f"{encoding} {WEIGHTS if isinstance(enc, ScoreWeights) else 'score bias added to q·k'}"
        f": {n_heads} heads, length {length}",
        chars,
    )
    title += "\n" + textwrap.fill("; ".join(n for n in notes if n), chars)
    fig, (first,) = new_figure(1, title, width=width, height=2.7 * rows + 0.2 * title.count("\n"))
    first.remove()
    grid = fig.subplots(rows, cols, squeeze=False)
    # a linear bias (ALiBi, a LinearSlopes): each head's slope, which sets its scale
    slopes = enc.linear_slopes(masked) if isinstance(enc, LinearSlopes) else None
    for n, ax in enumerate(grid.flat):
        if n >= len(chosen):
            ax.set_visible(False)
            continue
        h = chosen[n]
        slope = "" if slopes is None else f", m = {slopes[h]:.3g}"
        _panel(fig, ax, matrix[n], f"head {h}{slope}")
    return fig


def _state(trainable: bool, config: dict[str, Any], matrix: torch.Tensor) -> str:
    """What the title says of a learned encoding's parameters ("" for a fixed one)."""
    if not trainable:
        return ""
    state = init_note(config)
    shown = matrix[~matrix.isnan()]
    if shown.numel() and bool((shown == shown[0]).all()):
        state += ", constant until trained"
    return state


def _panel(fig: Figure, ax: Axes, values: torch.Tensor, title: str) -> None:
    """One head's ``[L, L]`` bias on ``ax``, on its own colour scale, masked cells (NaN)
    hatched, with its colour bar."""
    import matplotlib
    from matplotlib.patches import Rectangle

    shown = values[~values.isnan()]
    low, high = (float(shown.min()), float(shown.max())) if shown.numel() else (0.0, 0.0)
    if low == high:  # a flat head (ALiBi's unbiased heads): a visible, centred scale
        low, high = low - 1.0, high + 1.0
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="none")  # NaN: see-through
    image = ax.imshow(
        values.numpy(), cmap=cmap, vmin=low, vmax=high, origin="upper", interpolation="none"
    )
    if bool(values.isnan().any()):  # the hatching shows through the masked cells
        n = values.shape[-1]
        hatch = Rectangle((-0.5, -0.5), n, n, fill=False, hatch="///", edgecolor="0.7", lw=0)
        ax.add_patch(hatch).set_zorder(image.get_zorder() - 0.5)
    ax.set_title(title)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    fig.colorbar(image, ax=ax, shrink=0.9)


def drawn_config(encoding: str, causal: bool | None = None) -> dict[str, Any]:
    """The configuration keys (beyond ``n_heads``) encoding ``encoding`` is drawn with.

    ``head_dim`` :data:`SHAW_HEAD_DIM` and ``dim`` :data:`FOX_DIM` where it has them;
    ``init_std`` :data:`INIT_STD` where its default (0) starts a table at zero; with
    ``causal=False``, each of its :data:`DIRECTION_KEYS` True (its bidirectional form).
    """
    fields = {f.name: f for f in dataclasses.fields(registry.get(encoding).Config)}
    sizes = {"head_dim": SHAW_HEAD_DIM, "dim": FOX_DIM}
    config: dict[str, Any] = {key: size for key, size in sizes.items() if key in fields}
    config.update(zero_start(encoding))
    if causal is False:
        config.update({key: True for key in DIRECTION_KEYS if key in fields})
    return config


def zero_start(encoding: str) -> dict[str, float]:
    """``{"init_std": INIT_STD}`` when encoding ``encoding`` declares an ``init_std`` whose
    default, 0, starts its table at zero (T5, CoPE: a flat, blank figure), else ``{}``."""
    fields = {f.name: f for f in dataclasses.fields(registry.get(encoding).Config)}
    zero = INIT_KEY in fields and fields[INIT_KEY].default == 0
    return {INIT_KEY: INIT_STD} if zero else {}


def init_note(config: dict[str, Any]) -> str:
    """What a title says of a learned encoding drawn with ``config``'s keys."""
    if INIT_KEY in config:
        spread = f"{INIT_KEY}={config[INIT_KEY]:g}"
        return f"random init: {spread}, seed {SEED} (default 0: zero until trained)"
    return f"at initialisation, seed {SEED}"


def build_bias(encoding: str, n_heads: int, config: dict[str, Any]) -> BiasEncoding:
    """Encoding ``encoding`` with ``n_heads`` heads and ``config``, initialised with seed 0
    (the global generator's state is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        enc = registry.create(encoding, n_heads=n_heads, **config)
    assert isinstance(enc, BiasEncoding)
    return enc


def causal_only(enc: BiasEncoding) -> bool:
    """Whether ``enc``'s bias means something only for keys at or before their query: it
    is defined over those only (an :class:`~posenc.base.InputBias` or
    :class:`~posenc.base.ScoreBias`), or it is the causal form of one of its
    :data:`DIRECTION_KEYS` (ALiBi's ``-m (i - j)``, which rewards far future keys; T5's
    buckets, which give later keys the bias of distance 0)."""
    if isinstance(enc, (InputBias, ScoreBias, ScoreWeights, InputTransforms)):
        return True
    return any(getattr(enc.config, key, None) is False for key in DIRECTION_KEYS)


def bias_matrix(enc: BiasEncoding, length: int, masked: bool = False) -> torch.Tensor:
    """The bias of ``enc`` for positions ``0 .. length-1``, NaN for keys after their query
    when ``masked`` (and where the encoding defines none: FoX's).

    Returns:
        ``[n_heads, length, length]`` float32 on the CPU.
    """
    positions = torch.arange(length)
    with torch.no_grad():
        if isinstance(enc, InputBias):  # FoX
            out = input_bias(cast(Fox, enc), length)
        elif enc.needs_q:  # Shaw, CoPE: the bias of fixed random queries (and keys)
            generator = torch.Generator().manual_seed(SEED)
            q = torch.randn(1, enc.n_heads, length, SHAW_HEAD_DIM, generator=generator)
            k = torch.randn(q.shape, generator=generator)
            if isinstance(enc, ScoreWeights):  # stick-breaking: its weights, for the same
                out = cast(StickBreaking, enc).weights(positions, positions, q=q, k=k)[0]
            elif isinstance(enc, InputTransforms):  # PaTH: what its turns change in q·k
                x = torch.randn(1, length, FOX_DIM, generator=generator)
                out = cast(Path, enc).bias(positions, positions, q=q, k=k, x=x)[0]
            elif isinstance(enc, ScoreBias):
                out = cast(CoPE, enc).bias(positions, positions, q=q, k=k)[0]  # [n_heads, L, L]
            else:
                out = enc.bias(positions, positions, q=q)[0]
        else:
            out = enc.bias(positions, positions)  # [n_heads, L, L]
    if masked:
        out = out.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), math.nan)
    return out.float()


def input_bias(enc: Fox, length: int) -> torch.Tensor:
    """The bias of an encoding that reads the layer's input (FoX's forget gates) for a
    fixed random input (seed 0), over keys at or before their query (NaN elsewhere: it
    defines no bias for later keys).

    Returns:
        ``[n_heads, length, length]`` float32 on the CPU.
    """
    x = torch.randn(1, length, enc.dim, generator=torch.Generator().manual_seed(SEED))
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
