"""Per rotary pair, the wavelength under each context-extension scaling of RoPE.

Pair i of RoPE turns by ``θ_i = base^(-2i/d)`` per token (Su et al. 2021, arXiv:2104.09864),
a wavelength of ``2π/θ_i`` tokens. Pairs whose wavelength is longer than the training
context never completed a turn in training; extending the context is choosing new
frequencies so that the target length looks familiar: position interpolation divides all by
the factor (Chen et al. 2023, arXiv:2306.15595), NTK raises the base (bloc97, 2023), YaRN
(Peng et al. 2023, arXiv:2309.00071) and Llama 3.1 keep the fast pairs and interpolate the
slow ones, LongRoPE (Ding et al. 2024, arXiv:2402.13753) rescales each pair by its own
factor. The formulas are :data:`posenc.functional.ROPE_SCALINGS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..rotary.scaling import ScalingConfig, parse_scaling
from .common import check_number, check_size, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["NAMED_SCALINGS", "frequencies", "named_scaling"]

#: the scalings :func:`frequencies` takes by name (``none`` is plain RoPE)
NAMED_SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")

DEFAULT_SCALINGS = ("none", "linear", "ntk", "yarn", "llama3", "longrope")


def frequencies(
    head_dim: int = 128,
    base: float = 10000.0,
    original: int = 4096,
    target: int = 32768,
    scalings: Sequence[str | Mapping[str, Any] | tuple[str, Mapping[str, Any]]] = DEFAULT_SCALINGS,
    rotary_dim: int | None = None,
    target_name: str = "target",
) -> Figure:
    """The wavelength ``2π/θ_i`` of each rotary pair under each scaling, log y.

    A scaling given by name gets ``factor = target / original`` and the documented
    defaults of :func:`named_scaling`; a ``rope_parameters`` dict (``{"rope_type": "yarn",
    ...}``, e.g. a checkpoint's) is drawn as given, at its own ``rope_theta`` if it has one
    (an NTK extension written as a new base), labelled by its rope type, or by ``label`` when
    given as a ``(label, dict)`` pair. The length-dependent scalings (``dynamic``,
    ``longrope``) are drawn at ``seq_len = target``.

    Args:
        head_dim: the size of each head (even): ``head_dim / 2`` pairs.
        base: the wavelength base (``rope_theta``).
        original: the training context length (``original_max_position_embeddings``).
        target: the extended context length (> ``original``).
        scalings: the scalings to draw, each a name (``none`` for plain RoPE,
            ``linear``, ``ntk``, ``dynamic``, ``yarn``, ``llama3``, ``longrope``: the
            :data:`NAMED_SCALINGS`), a ``rope_parameters`` dict or a
            ``(label, rope_parameters)`` pair.
        rotary_dim: how many dimensions of each head rotate (partial rotary, GPT-NeoX):
            ``rotary_dim / 2`` pairs; the whole head if omitted.
        target_name: what ``target`` is called on its line (``"extended"``: a checkpoint's
            own extended context).

    Returns:
        The figure: one line per scaling (x = pair index ``i``, y = ``2π/θ_i`` in tokens,
        labelled by the scaling), and dashed horizontal lines at ``original`` and ``target``.

    Raises:
        ValueError: for a bad value, naming the parameter.
    """
    rotary_dim = _check_sizes(head_dim, base, rotary_dim, original, target)
    if not isinstance(target_name, str) or not target_name:
        raise ValueError(f"target_name must be a non-empty str, got {target_name!r}")
    records = _records(scalings, rotary_dim, original, target)

    factor = target / original
    # the context's ratio, which is not a scaling's factor (Llama 3.1: 8 over 8192 tokens
    # reaches 131072, ×16)
    title = f"RoPE wavelengths per pair: base {base:g}, {original} -> {target} tokens (×{factor:g})"
    fig, (ax,) = new_figure(1, title, width=6.4, height=4.6)
    pairs = range(rotary_dim // 2)
    for label, record, own_base in records:
        line_base = float(base if own_base is None else own_base)
        inv_freq, _ = record.inv_freq(head_dim, rotary_dim, line_base, seq_len=target)
        wavelength = 2 * math.pi / inv_freq  # [head_dim // 2], tokens
        ax.plot(list(pairs), wavelength.numpy(), marker=".", markersize=3, label=label)
    _context_lines(ax, original, target, target_name)
    ax.set_yscale("log")
    ax.set_xlabel("rotary pair index i (0 turns fastest)")
    ax.set_ylabel("wavelength 2π/θ_i (tokens)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title="scaling")
    return fig


def _check_sizes(
    head_dim: int, base: float, rotary_dim: int | None, original: int, target: int
) -> int:
    """Raise, naming the parameter, unless the sizes can be drawn; the rotary dimension."""
    check_size("head_dim", head_dim, minimum=2, even=True)
    check_number("base", base)
    if rotary_dim is None:
        rotary_dim = head_dim
    check_size("rotary_dim", rotary_dim, minimum=2, even=True)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim ({rotary_dim}) exceeds head_dim ({head_dim})")
    check_size("original", original)
    check_size("target", target)
    if target <= original:
        raise ValueError(f"target ({target}) must exceed original ({original})")
    return rotary_dim


def _context_lines(ax: Any, original: int, target: int, target_name: str) -> None:
    """Dashed horizontal lines at the ``original`` and ``target`` context lengths, named."""
    for length, name, colour in ((original, "original", "0.35"), (target, target_name, "0.6")):
        ax.axhline(length, color=colour, linestyle="--", linewidth=1.0)
        ax.annotate(
            f"{name} context {length}",
            (0, length),
            textcoords="offset points",
            xytext=(2, 3),
            fontsize=8,
            color=colour,
        )


def named_scaling(name: str, head_dim: int, original: int, target: int) -> dict[str, Any]:
    """The ``rope_parameters`` dict :func:`frequencies` draws for scaling ``name``.

    ``factor = target / original`` throughout. Documented defaults: YaRN's
    ``beta_fast = 32``, ``beta_slow = 1`` (Peng et al. 2023); Llama 3.1's
    ``low_freq_factor = 1``, ``high_freq_factor = 4`` (its ``config.json``); LongRoPE's
    factors are searched per model, so an illustrative pair is used: ``short_factor`` all 1
    (unchanged up to ``original``) and ``long_factor_i = factor^((i/(n-1))^2)``, from 1 on
    the fastest pair to ``factor`` on the slowest (a plain geometric ramp would equal NTK);
    pass a checkpoint's dict for real ones.

    Raises:
        ValueError: for a name not in :data:`NAMED_SCALINGS`, listing them.
    """
    if name not in NAMED_SCALINGS:
        raise ValueError(f"scalings must be names in {NAMED_SCALINGS} or dicts, got {name!r}")
    factor = target / original
    n_pairs = head_dim // 2
    keys: dict[str, dict[str, Any]] = {
        "none": {},
        "linear": {"factor": factor},
        "ntk": {"factor": factor},
        "dynamic": {"factor": factor, "original_max_position_embeddings": original},
        "yarn": {"factor": factor, "original_max_position_embeddings": original},
        "llama3": {
            "factor": factor,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": original,
        },
        "longrope": {
            "factor": factor,
            "short_factor": [1.0] * n_pairs,
            "long_factor": [factor ** ((i / max(n_pairs - 1, 1)) ** 2) for i in range(n_pairs)],
            "original_max_position_embeddings": original,
        },
    }
    rope_type = "default" if name == "none" else name
    return {"rope_type": rope_type, **keys[name]}


def _is_pair(entry: Any) -> bool:
    """Whether ``entry`` is a ``(label, rope_parameters)`` pair."""
    return (
        isinstance(entry, tuple)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], Mapping)
    )


def _records(
    scalings: Any, rotary_dim: int, original: int, target: int
) -> list[tuple[str, ScalingConfig, float | None]]:
    """:func:`_record` of every entry of ``scalings``, which must be a non-empty sequence."""
    single = isinstance(scalings, (str, bytes, Mapping)) or _is_pair(scalings)
    if single or not isinstance(scalings, Sequence):
        raise ValueError(f"scalings must be a sequence of names or dicts, got {scalings!r}")
    if not scalings:
        raise ValueError("scalings must name at least one scaling")
    return [_record(s, rotary_dim, original, target) for s in scalings]


def _record(
    scaling: Any, rotary_dim: int, original: int, target: int
) -> tuple[str, ScalingConfig, float | None]:
    """``(legend label, validated record, its own base or None)`` of one entry of ``scalings``."""
    if isinstance(scaling, str):
        label, scaling = scaling, named_scaling(scaling, rotary_dim, original, target)
    elif _is_pair(scaling):
        label, scaling = scaling
    elif isinstance(scaling, Mapping):
        label = str(scaling.get("rope_type", scaling.get("type", "default")))
    else:
        raise ValueError(f"scalings must hold names or rope_parameters dicts, got {scaling!r}")
    try:
        record, encoding_keys = parse_scaling(scaling)
    except (TypeError, ValueError) as error:
        raise ValueError(f"scalings: {error}") from None
    own_base = encoding_keys.pop("rope_theta", None)
    if own_base is not None:
        check_number("rope_theta", own_base)
    if encoding_keys:
        raise ValueError(
            f"scalings: give the rotary dimension as rotary_dim, not {sorted(encoding_keys)}"
        )
    return label, record, own_base
