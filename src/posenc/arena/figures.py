"""The arena's figures: one function per experiment, each taking the run's measurements
(records, any seeds) and returning a matplotlib ``Figure`` of the experiment's primary
metric, aggregated over seeds (mean line, shaded min-max band over seeds where several ran).

matplotlib is imported inside the functions (the object API, no pyplot state), so importing
this module needs nothing optional. :data:`FIGURES` maps an experiment name to its function.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .panels import metric_rows, sort_key
from .results import EXPERIMENTS

__all__ = [
    "FIGURES",
    "context_extension",
    "extrapolation",
    "figure",
    "length_generalization",
    "lost_in_the_middle",
    "nope_needs_causality",
    "png_bytes",
]

Records = Iterable[Mapping[str, Any]]
_UNITS = {
    "perplexity": "perplexity (per byte)",
    "bits_per_byte": "bits per byte",
    "loss": "loss (nats per byte)",
    "accuracy": "exact-match accuracy",
    "token_accuracy": "per-token accuracy",
}


def _log_y(ax: Any) -> None:
    """A log y axis labelled in plain numbers (8, 9, 10, 20), not powers of ten."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize="x-small")


def _figure(n_panels: int, title: str) -> tuple[Any, list[Any]]:
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


def _colors(rows: Sequence[Mapping[str, Any]], field: str) -> dict[Any, Any]:
    """One colour per value of ``field`` (tab10, then tab20), in the order first seen."""
    from matplotlib import colormaps

    values = list(dict.fromkeys(r[field] for r in rows))
    cmap = colormaps["tab10" if len(values) <= 10 else "tab20"]
    return {v: cmap(i % cmap.N) for i, v in enumerate(values)}


def _values(rows: Sequence[Mapping[str, Any]], field: str) -> list[Any]:
    return sorted({r.get(field) for r in rows}, key=sort_key)


def _line(ax: Any, rows: Sequence[Mapping[str, Any]], x: str, **style: Any) -> Any:
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


def _empty(ax: Any, text: str = "no measurements") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def extrapolation(measurements: Records) -> Any:
    """Perplexity against evaluation length per encoding, log-log, one panel per mode
    (chunks, sliding); the training length dashed; encodings that cannot run past it listed
    in the legend as ``(cannot run past L)``."""
    from matplotlib.ticker import NullLocator

    rows, metric = metric_rows(measurements, "extrapolation")
    modes = _values(rows, "mode")
    fig, axes = _figure(len(modes), "Extrapolation: trained at L, evaluated at longer lengths")
    colors = _colors(rows, "encoding")
    for ax, mode in zip(axes, modes, strict=False):
        here = [r for r in rows if r.get("mode") == mode]
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            mine = [r for r in here if r["encoding"] == encoding]
            ran = [r["eval_length"] for r in mine if r["mean"] is not None]
            label = encoding
            if len(ran) < len(mine):
                label += f" (cannot run past {max(ran)})" if ran else " (cannot run)"
            line = _line(ax, mine, "eval_length", color=colors[encoding], label=label)
            if line is None:  # still named in the legend
                ax.plot([], [], color=colors[encoding], label=label)
        for length in sorted({r["train_length"] for r in here}):
            ax.axvline(length, color="grey", linestyle="--", linewidth=1, label=f"L = {length}")
        ax.set_xscale("log", base=2)
        _log_y(ax)
        lengths = _values(here, "eval_length")
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(f"mode: {mode}" if mode is not None else "")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(_UNITS.get(metric or "", metric or ""))
    if rows:  # one legend for both panels, beside them: the lines stay visible
        axes[-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    else:
        _empty(axes[0])
    return fig


def context_extension(measurements: Records) -> Any:
    """Perplexity at ``s·L`` against the factor ``s`` per RoPE scaling, panels zero-shot and
    fine-tuned, log y."""
    rows, metric = metric_rows(measurements, "context-extension")
    stages = _values(rows, "stage")
    fig, axes = _figure(len(stages), "Context extension: RoPE scalings at s·L")
    colors = _colors(rows, "scaling")
    for ax, stage in zip(axes, stages, strict=False):
        here = [r for r in rows if r.get("stage") == stage]
        for scaling in _values(here, "scaling"):
            mine = [r for r in here if r.get("scaling") == scaling]
            label = (
                str(scaling)
                if any(r["mean"] is not None for r in mine)
                else f"{scaling} (cannot run)"
            )
            line = _line(ax, mine, "factor", color=colors[scaling], label=label)
            if line is None:
                ax.plot([], [], color=colors[scaling], label=label)
        _log_y(ax)
        factors = _values(here, "factor")
        ax.set_xticks(factors, [f"×{f}" for f in factors])
        ax.set_title(f"{stage}" if stage is not None else "")
        ax.set_xlabel("context factor s (evaluated at s·L tokens)")
        ax.set_ylabel(_UNITS.get(metric or "", metric or ""))
        ax.legend(fontsize="small")
    if not rows:
        _empty(axes[0])
    return fig


def length_generalization(measurements: Records) -> Any:
    """Exact-match accuracy (solid) and per-token accuracy (dotted) against test length per
    encoding, one panel per task, the training lengths shaded."""
    rows, _ = metric_rows(measurements, "length-generalization")
    per_token, _ = metric_rows(measurements, "length-generalization", "token_accuracy")
    tasks = _values(rows, "task")
    fig, axes = _figure(
        len(tasks), "Length generalisation: synthetic tasks past the training lengths"
    )
    colors = _colors(rows, "encoding")
    for ax, task in zip(axes, tasks, strict=False):
        here = [r for r in rows if r.get("task") == task]
        train = max(r["train_length"] for r in here)
        ax.axvspan(0, train, color="grey", alpha=0.15, linewidth=0, label=f"trained (≤ {train})")
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            mine = [r for r in here if r["encoding"] == encoding]
            _line(ax, mine, "eval_length", color=colors[encoding], label=encoding)
            tokens = [r for r in per_token if r.get("task") == task and r["encoding"] == encoding]
            _line(ax, tokens, "eval_length", color=colors[encoding], linestyle=":")
        if per_token:
            ax.plot([], [], color="grey", linestyle=":", label="per token (dotted)")
        ax.set_xlim(0, max(r["eval_length"] for r in here) * 1.05)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"task: {task}" if task is not None else "")
        ax.set_xlabel("test length (tokens)")
        ax.set_ylabel("exact-match accuracy" + (" (dotted: per token)" if per_token else ""))
        ax.legend(fontsize="small")
    if not rows:
        _empty(axes[0])
    return fig


def nope_needs_causality(measurements: Records) -> Any:
    """Grouped bars: the metric per encoding, causal beside bidirectional (log y when the
    bars span more than a factor 20)."""
    rows, metric = metric_rows(measurements, "nope-needs-causality")
    fig, axes = _figure(1, "NoPE needs causality: causal vs bidirectional attention")
    ax = axes[0]
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    modes = _values(rows, "mode")
    width = 0.8 / max(len(modes), 1)
    colors = {"causal": "#1f77b4", "bidirectional": "#d62728"}
    for j, mode in enumerate(modes):
        means = []
        for encoding in encodings:
            hit = [r for r in rows if r["encoding"] == encoding and r.get("mode") == mode]
            means.append(hit[0]["mean"] if hit and hit[0]["mean"] is not None else 0.0)
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(encodings))]
        bars = ax.bar(xs, means, width, label=str(mode), color=colors.get(str(mode)))
        for bar, mean in zip(bars, means, strict=True):
            if mean == 0.0:
                ax.annotate("n/a", (bar.get_x() + width / 2, 0), ha="center", va="bottom")
    means = [r["mean"] for r in rows if r["mean"]]
    if means and max(means) / min(means) > 20:
        _log_y(ax)
    ax.set_xticks(range(len(encodings)), encodings)
    ax.set_xlabel("encoding")
    ax.set_ylabel(_UNITS.get(metric or "", metric or ""))
    if rows:
        ax.legend(title="attention", fontsize="small")
    else:
        _empty(ax)
    return fig


def lost_in_the_middle(measurements: Records) -> Any:
    """Key-value retrieval accuracy against the gold pair's position per encoding, panels
    query-last and query-first; solid lines for the fewest pairs, dashed for more."""
    rows, metric = metric_rows(measurements, "lost-in-the-middle")
    modes = _values(rows, "mode")
    fig, axes = _figure(len(modes), "Lost in the middle: retrieval by position of the gold pair")
    colors = _colors(rows, "encoding")
    styles = ["-", "--", ":", "-."]
    pair_counts = _values(rows, "n_pairs")
    for ax, mode in zip(axes, modes, strict=False):
        here = [r for r in rows if r.get("mode") == mode]
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            for k, n_pairs in enumerate(pair_counts):
                mine = [
                    r for r in here if r["encoding"] == encoding and r.get("n_pairs") == n_pairs
                ]
                if mine:
                    label = f"{encoding}, {n_pairs} pairs" if n_pairs is not None else encoding
                    _line(ax, mine, "gold_position", color=colors[encoding],
                          linestyle=styles[k % len(styles)], label=label)  # fmt: skip
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"{mode}" if mode is not None else "")
        ax.set_xlabel("position of the gold pair (0 = first)")
        ax.set_ylabel(_UNITS.get(metric or "", metric or ""))
        ax.legend(fontsize="small")
    if not rows:
        _empty(axes[0])
    return fig


FIGURES: dict[str, Callable[[Records], Any]] = {
    "extrapolation": extrapolation,
    "context-extension": context_extension,
    "length-generalization": length_generalization,
    "nope-needs-causality": nope_needs_causality,
    "lost-in-the-middle": lost_in_the_middle,
}
if tuple(FIGURES) != EXPERIMENTS:  # a new experiment needs its figure here
    raise RuntimeError(f"FIGURES names {tuple(FIGURES)}, not the experiments {EXPERIMENTS}")


def figure(experiment: str, measurements: Records) -> Any:
    """The figure of ``experiment`` (a name in ``EXPERIMENTS``)."""
    if experiment not in FIGURES:
        raise ValueError(f"unknown experiment {experiment!r}; expected one of {EXPERIMENTS}")
    return FIGURES[experiment](measurements)


def png_bytes(fig: Any, dpi: int = 100) -> bytes:
    """``fig`` as PNG bytes (white background, no metadata: nothing names a URL)."""
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=dpi, facecolor="white", metadata={"Software": None})
    return out.getvalue()
