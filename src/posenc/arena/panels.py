"""Arena panels: the pivot tables of a run's numbers (aggregated over seeds), shared by the
terminal table, the report, the summary and the figures (the comparison of two runs is in
:mod:`~posenc.arena.compare`).

``rich`` (the terminal table) is imported only when a table is rendered (:func:`load_rich`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .results import AGGREGATE_FIELDS, EXPERIMENTS, aggregate

__all__ = [
    "Panel",
    "format_cell",
    "load_rich",
    "metric_rows",
    "panels",
    "primary_metric",
    "render",
    "sort_key",
    "table",
]

# Known values of the categorical keys, in the order tables and figures show them.
_ORDER = (
    "chunks",
    "sliding",
    "causal",
    "bidirectional",
    "query-last",
    "query-first",
    "zero-shot",
    "fine-tuned",
    "none",
    "linear",
    "ntk",
    "dynamic",
    "yarn",
    "copy",
    "reverse",
    "kv",
)


@dataclass(frozen=True)
class _Layout:
    panels: tuple[str, ...]  # one table per value of these keys
    column: str  # the key spread over columns
    hide: tuple[str, ...]  # keys that follow from the column (not row labels)
    metrics: tuple[str, ...]  # preferred metric first
    also: tuple[str, ...] = ()  # further metrics with tables of their own


_LAYOUTS = {
    "extrapolation": _Layout(("mode",), "eval_length", (), ("perplexity", "bits_per_byte", "loss")),
    "context-extension": _Layout(
        ("stage",), "factor", ("eval_length",), ("perplexity", "bits_per_byte", "loss")
    ),
    "length-generalization": _Layout(
        ("task",), "eval_length", (), ("accuracy",), also=("token_accuracy",)
    ),
    "nope-needs-causality": _Layout((), "mode", (), ("perplexity", "loss", "bits_per_byte")),
    "lost-in-the-middle": _Layout(
        ("mode", "n_pairs"), "gold_position", ("eval_length", "train_length"), ("accuracy",)
    ),
}


@dataclass(frozen=True)
class Panel:
    """One table of numbers: ``header`` (row-label names, then column labels) and ``rows``
    (row labels, then cells), all strings; the first ``n_labels`` columns are labels."""

    title: str
    n_labels: int
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers in order, then known names in their canonical order, then other strings."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    if value in _ORDER:
        return (1, _ORDER.index(value))
    return (2, str(value))


def primary_metric(rows: Sequence[Mapping[str, Any]], experiment: str) -> str | None:
    """The metric an experiment's table and figure show: its preferred one, if measured."""
    present = [r["metric"] for r in rows if r["experiment"] == experiment]
    for metric in _LAYOUTS[experiment].metrics:
        if metric in present:
            return metric
    return present[0] if present else None


def metric_rows(
    measurements: Iterable[Mapping[str, Any]], experiment: str, metric: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """The experiment's rows aggregated over seeds, of ``metric`` (default: its primary,
    :func:`primary_metric`), and that metric."""
    rows = [r for r in aggregate(measurements) if r["experiment"] == experiment]
    metric = primary_metric(rows, experiment) if metric is None else metric
    return [r for r in rows if r["metric"] == metric], metric


#: metrics in [0, 1]: two decimals (as every number below 10,000; larger ones 4 digits)
_FRACTIONS = ("accuracy", "token_accuracy")


def _number(value: float, metric: str | None = None) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.2f}" if metric in _FRACTIONS or abs(value) < 1e4 else f"{value:.4g}"


def format_cell(row: Mapping[str, Any] | None) -> str:
    """An aggregated row as a table cell: ``mean`` (``± std`` where seeds differ), ``cannot
    run`` where nothing ran, empty where the case was not measured."""
    if row is None:
        return ""
    if row["mean"] is None:
        return "cannot run"
    text = _number(row["mean"], row.get("metric"))
    if row["n"] > 1 and row["std"]:
        text += f" ± {row['std']:.2g}"
    return text


def _multiple(length: int, train_length: int) -> str:
    """``length`` as a multiple of the training length: ``L``, ``2L``, ``L/2``, ``1.5L``."""
    if length == train_length:
        return "L"
    if length > train_length:
        ratio = length / train_length
        return f"{ratio:g}L"
    ratio = train_length / length
    return f"L/{ratio:g}" if ratio == int(ratio) else f"{length / train_length:.2g}L"


def _column_label(experiment: str, field: str, value: Any, train_lengths: set[Any]) -> str:
    if field == "eval_length" and len(train_lengths) == 1 and experiment == "extrapolation":
        return f"{value} ({_multiple(value, next(iter(train_lengths)))})"
    if field == "factor":
        return f"×{value}"
    return str(value)


def panels(results: Mapping[str, Any], experiment: str) -> list[Panel]:
    """The tables of an experiment's numbers (the primary metric, aggregated over seeds),
    as :class:`Panel` objects; ``[]`` when the experiment has no measurements."""
    if experiment not in _LAYOUTS:
        raise ValueError(f"unknown experiment {experiment!r}; expected one of {EXPERIMENTS}")
    layout = _LAYOUTS[experiment]
    every = [r for r in aggregate(results["measurements"]) if r["experiment"] == experiment]
    out: list[Panel] = []
    for metric in (primary_metric(every, experiment), *layout.also):
        rows = [r for r in every if r["metric"] == metric]
        if rows:
            out += _metric_panels(experiment, layout, metric, rows)
    return out


def _metric_panels(
    experiment: str, layout: _Layout, metric: str | None, rows: list[dict[str, Any]]
) -> list[Panel]:
    fixed = {"experiment", "metric", layout.column, *layout.panels, *layout.hide}
    fields = [k for r in rows for k in r if k not in fixed]
    fields = [
        k
        for k in dict.fromkeys(fields)
        if k not in (*AGGREGATE_FIELDS, "note") and len({repr(r.get(k)) for r in rows}) > 1
    ] or ["encoding"]
    train_lengths = {r["train_length"] for r in rows}
    out = []
    panel_values = sorted(
        {tuple(r.get(k) for k in layout.panels) for r in rows},
        key=lambda vs: [sort_key(v) for v in vs],
    )
    for pv in panel_values:
        members = [r for r in rows if tuple(r.get(k) for k in layout.panels) == pv]
        columns = sorted({r[layout.column] for r in members}, key=sort_key)
        labels = list(dict.fromkeys(tuple(r.get(k) for k in fields) for r in members))
        cells = {(tuple(r.get(k) for k in fields), r[layout.column]): r for r in members}
        body = tuple(
            (
                *("" if v is None else str(v) for v in label),
                *(format_cell(cells.get((label, c))) for c in columns),
            )
            for label in labels
        )
        where = ", ".join(f"{k} {v}" for k, v in zip(layout.panels, pv, strict=True))
        title = f"{experiment}: {metric}" + (f" ({where})" if where else "")
        header = (
            *fields,
            *(_column_label(experiment, layout.column, c, train_lengths) for c in columns),
        )
        out.append(Panel(title, len(fields), header, body))
    return out


# --- terminal output -----------------------------------------------------------------------


def load_rich() -> Any:
    """The ``rich`` package (for the terminal tables), or an ImportError saying how to get it."""
    try:
        import rich.box
        import rich.console
        import rich.table
    except ImportError:
        raise ImportError(
            "the arena's terminal table needs rich: pip install 'posenc[arena]'"
        ) from None
    return rich


def render(tables: Sequence[Any], width: int = 140) -> str:
    """rich ``tables`` as plain text ``width`` columns wide (no colour codes)."""
    rich = load_rich()
    out = io.StringIO()
    console = rich.console.Console(
        file=out, width=width, color_system=None, force_terminal=False, highlight=False
    )
    for t in tables:
        console.print(t)
    return out.getvalue()


def _rich_table(panel: Panel) -> Any:
    rich = load_rich()
    t = rich.table.Table(
        title=panel.title,
        title_justify="left",
        min_width=len(panel.title),
        box=rich.box.SIMPLE_HEAD,  # no side borders: 16 gold positions fit in 140 columns
    )
    for i, name in enumerate(panel.header):
        t.add_column(name, justify="left" if i < panel.n_labels else "right", no_wrap=True)
    for row in panel.rows:
        t.add_row(*row)
    return t


def table(results: Mapping[str, Any], experiment: str | None = None) -> str:
    """The run's numbers as text tables (rich, 140 columns, no colour codes): every
    experiment present (or only ``experiment``), one table per panel (e.g. per mode).
    Extrapolation: rows encodings, columns eval lengths (L, 2L, ...), cells mean perplexity
    ± std over seeds, ``cannot run`` where it could not."""
    if experiment is not None and experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; expected one of {EXPERIMENTS}")
    names = [experiment] if experiment is not None else list(EXPERIMENTS)
    tables = [_rich_table(p) for name in names for p in panels(results, name)]
    if not tables:
        which = experiment or "any experiment"
        return f"no measurements for {which}\n"
    return render(tables)
