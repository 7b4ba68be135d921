"""The drawing helpers every experiment's figure shares: a white figure of side-by-side
panels, one colour per value, a mean line with the min-max band over seeds, a log axis
labelled in plain numbers, and the PNG bytes of a figure.

matplotlib is imported inside the functions (the object API, no pyplot state), so importing
this module, and every experiment module that uses it, needs nothing optional.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from .rows import sort_key

__all__ = ["UNITS", "colors", "empty", "line", "log_y", "new_figure", "png_bytes", "unit", "values"]

#: a metric -> its axis label
UNITS = {
    "perplexity": "perplexity (per byte)",
    "bits_per_byte": "bits per byte",
    "loss": "loss (nats per byte)",
    "accuracy": "exact-match accuracy",
    "token_accuracy": "per-token accuracy",
}


def log_y(ax: Any) -> None:
    """A log y axis labelled in plain numbers (8, 9, 10, 20), not powers of ten."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize="x-small")


def new_figure(n_panels: int, title: str) -> tuple[Any, list[Any]]:
    """A white figure with ``n_panels`` side by side and a title."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "the arena's figures need matplotlib: pip install 'posenc[arena]'"
        ) from None
    n = max(n_panels, 1)
    fig = Figure(figsize=(5.2 * n, 4.2), dpi=100, facecolor="white", layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0].tolist()
    for ax in axes:
        ax.set_facecolor("white")
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title)
    return fig, axes


def colors(rows: Sequence[Mapping[str, Any]], field: str) -> dict[Any, Any]:
    """One colour per value of ``field`` (tab10, then tab20), in the order first seen."""
    from matplotlib import colormaps

    values = list(dict.fromkeys(r[field] for r in rows))
    cmap = colormaps["tab10" if len(values) <= 10 else "tab20"]
    return {v: cmap(i % cmap.N) for i, v in enumerate(values)}


def values(rows: Sequence[Mapping[str, Any]], field: str) -> list[Any]:
    """The values of ``field`` in ``rows``, each once, in :func:`~.rows.sort_key` order."""
    return sorted({r.get(field) for r in rows}, key=sort_key)


def line(ax: Any, rows: Sequence[Mapping[str, Any]], x: str, **style: Any) -> Any:
    """Plot the mean over seeds against ``x`` (points that ran), with the min-max spread
    shaded where several seeds ran; returns the line (``None`` when nothing ran)."""
    pts = sorted((r for r in rows if r["mean"] is not None), key=lambda r: r[x])
    if not pts:
        return None
    xs = [r[x] for r in pts]
    (line,) = ax.plot(xs, [r["mean"] for r in pts], marker="o", markersize=3.5, **style)
    if any(r["n"] > 1 for r in pts):
        lo = [min(v for v in r["values"] if v is not None) for r in pts]
        hi = [max(v for v in r["values"] if v is not None) for r in pts]
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    return line


def empty(ax: Any, text: str = "no measurements") -> None:
    """Write ``text`` in the middle of an empty panel."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def unit(metric: str | None) -> str:
    """The axis label of ``metric`` (the metric's own name where it has none)."""
    return UNITS.get(metric or "", metric or "")


def png_bytes(fig: Any, dpi: int = 100) -> bytes:
    """``fig`` as PNG bytes (white background, no metadata: nothing names a URL)."""
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=dpi, facecolor="white", metadata={"Software": None})
    return out.getvalue()
