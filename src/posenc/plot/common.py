"""What every figure of :mod:`posenc.plot` shares: a blank figure, saving it, input checks.

matplotlib (the ``plot`` extra) is imported inside the functions, with the object API
(:class:`matplotlib.figure.Figure`, never pyplot: no global state, safe in threads and
notebooks), so importing :mod:`posenc.plot` does not import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import registry
from ..config import check_float, check_int
from ..encoding_info import EncodingInfo

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "SUFFIXES",
    "check_encoding",
    "check_number",
    "check_size",
    "check_sizes",
    "new_figure",
    "save",
]

#: the file formats :func:`save` writes, by suffix
SUFFIXES = (".png", ".svg")


def new_figure(
    n_panels: int = 1, title: str = "", width: float = 5.2, height: float = 4.2
) -> tuple[Figure, list[Axes]]:
    """A white figure with ``n_panels`` panels side by side, in constrained layout.

    Args:
        n_panels: how many panels, in one row (at least 1).
        title: the figure's title (``suptitle``); none when empty.
        width, height: the size of one panel in inches.

    Returns:
        ``(fig, axes)``: the :class:`~matplotlib.figure.Figure` and its ``n_panels`` axes.

    Raises:
        ImportError: when matplotlib is missing, naming the extra to install.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("posenc's figures need matplotlib: pip install 'posenc[plot]'") from None
    check_size("n_panels", n_panels)
    n = n_panels
    fig = Figure(figsize=(width * n, height), dpi=100, facecolor="white", layout="constrained")
    axes: list[Axes] = fig.subplots(1, n, squeeze=False)[0].tolist()
    for ax in axes:
        ax.set_facecolor("white")
    if title:
        fig.suptitle(title)
    return fig, axes


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as PNG or SVG (by its suffix), creating its folders.

    The background is white (the figure reads the same on a light and a dark page) and the
    metadata names no software URL.

    Args:
        fig: a figure from any function of :mod:`posenc.plot`.
        path: where to write it; the suffix ``.png`` or ``.svg`` chooses the format.

    Returns:
        The path written.

    Raises:
        ValueError: for another suffix, naming it.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"cannot save a figure as {suffix or 'no suffix'!r}: use {SUFFIXES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # the key that names matplotlib's URL differs by format: Software for PNG, Creator SVG
    metadata = {"Software": None} if suffix == ".png" else {"Creator": None, "Date": None}
    fig.savefig(path, format=suffix[1:], facecolor="white", metadata=metadata)
    return path


def check_size(name: str, value: Any, *, minimum: int = 1, even: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    check_int(name, value, minimum=minimum, even=even)


def check_sizes(name: str, value: Any, n: int, minimum: int = 1) -> tuple[int, ...]:
    """``value`` as a tuple of ``n`` ints >= ``minimum``, else an error naming ``name``."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != n:
        raise ValueError(f"{name} must be a tuple of {n} ints, got {value!r}")
    for i, item in enumerate(value):
        check_size(f"{name}[{i}]", item, minimum=minimum)
    return tuple(value)


def check_number(name: str, value: Any) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    check_float(name, value)


def check_encoding(name: Any, kinds: Iterable[str], figure: str) -> EncodingInfo:
    """The registry's record of encoding ``name``, if the figure ``figure`` can draw it.

    The figures on one axis of positions take 1-D encodings only; 2-D ones (a ``grid``
    configuration key) are drawn by :func:`posenc.plot.grid`.

    Raises:
        ValueError: for an unknown name, or an encoding of a kind not in ``kinds`` (saying
            which kinds the figure takes).
    """
    kinds = tuple(kinds)
    if not isinstance(name, str) or name not in registry.available():
        raise ValueError(f"encoding must be one of {registry.available()}, got {name!r}")
    info = registry.info(name)
    if info.kind not in kinds:
        raise ValueError(
            f"the {figure} figure takes {' or '.join(kinds)} encodings; "
            f"{name!r} is {_article(info.kind)} {info.kind} encoding"
        )
    if "grid" in config_keys(name):
        raise ValueError(
            f"the {figure} figure takes 1-D {' or '.join(kinds)} encodings; {name!r} is 2-D: "
            "see the grid figure"
        )
    return info


def _article(word: str) -> str:
    """``"an"`` before a word that starts with a vowel (``additive``), else ``"a"``."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def config_keys(name: str) -> list[str]:
    """The configuration keys of encoding ``name`` (the fields of its ``Config``)."""
    return [field.name for field in dataclasses.fields(registry.get(name).Config)]
