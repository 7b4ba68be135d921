"""Arena panels: the pivot tables of a run's numbers (aggregated over seeds), shared by the
terminal table and the report, laid out as each experiment's record declares
(:attr:`~posenc.arena.experiments.base.Experiment.layout`); and the rows each experiment's
figure and summary read (:func:`experiment_rows`). The comparison of two runs is
:mod:`.compare`.

``rich`` (the terminal table) is imported only when a table is rendered (:func:`load_rich`).
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...arguments import check_int
from ..experiments import EXPERIMENTS, NAMES, Layout, get
from .records import AGGREGATE_FIELDS, Records
from .rows import Rows, sort_key

__all__ = [
    "Panel",
    "experiment_rows",
    "fitted",
    "format_cell",
    "layouts",
    "load_rich",
    "metric_rows",
    "panels",
    "render",
    "split",
    "spread",
    "table",
    "terminal_width",
    "transposed",
]


@dataclass(frozen=True)
class Panel:
    """One table of numbers: ``header`` (row-label names, then column labels) and ``rows``
    (row labels, then cells), all strings; the first ``n_labels`` columns are labels."""

    title: str
    n_labels: int
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def experiment_rows(measurements: Records, experiment: str) -> Rows:
    """The :class:`~.rows.Rows` of ``experiment`` (a name in ``EXPERIMENTS``) in a run's
    ``measurements``: what its figure and its summary read.

    Raises:
        ValueError: for an unknown experiment.
    """
    record = get(experiment)
    return Rows.of(measurements, record.name, record.layout.metrics)


def metric_rows(
    measurements: Records, experiment: str, metric: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """The experiment's rows aggregated over seeds, of ``metric`` (default: its primary,
    the first of its layout's metrics that was measured), and that metric."""
    return experiment_rows(measurements, experiment).metric(metric)


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


def _column_label(layout: Layout, value: Any, train_lengths: set[Any]) -> str:
    field = layout.column
    if field == "eval_length" and len(train_lengths) == 1 and layout.multiples:
        return f"{value} ({_multiple(value, next(iter(train_lengths)))})"
    if field == "factor":
        return f"×{value}"
    return str(value)


def panels(results: Mapping[str, Any], experiment: str) -> list[Panel]:
    """The tables of an experiment's numbers (the primary metric, then the layout's further
    metrics, aggregated over seeds), as :class:`Panel` objects; ``[]`` when the experiment
    has no measurements."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; expected one of {NAMES}")
    layout = EXPERIMENTS[experiment].layout
    found = experiment_rows(results["measurements"], experiment)
    out: list[Panel] = []
    for metric in (found.primary, *layout.also):
        rows, _ = found.metric(metric)
        if rows:
            out += _metric_panels(experiment, layout, metric, rows)
    return out


def _metric_panels(
    experiment: str, layout: Layout, metric: str | None, rows: list[dict[str, Any]]
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
            *(_column_label(layout, c, train_lengths) for c in columns),
        )
        out.append(Panel(title, len(fields), header, body))
    return out


# --- terminal output -----------------------------------------------------------------------


def load_rich() -> Any:
    """The ``rich`` package (for the terminal tables), or an ImportError saying how to get it."""
    try:
        import rich.box
        import rich.console
        import rich.measure
        import rich.table
    except ImportError:
        raise ImportError(
            "the arena's terminal table needs rich: pip install 'posenc[arena]'"
        ) from None
    return rich


#: wider than any table: the width tables are measured at before they are laid out
UNBOUNDED = 10_000


def terminal_width() -> int:
    """The width the arena's text tables are laid out in: the terminal's, or ``$COLUMNS``
    (else 80) when stdout is not a terminal (:func:`posenc.terminal.console`)."""
    from ...terminal import console  # rich only when a table is drawn

    return int(console().width)


def render(tables: Sequence[Any], width: int | None = None) -> str:
    """rich ``tables`` as plain text ``width`` columns wide (default:
    :func:`terminal_width`), no colour codes, no trailing spaces."""
    if width is not None:
        check_int("width", width)
    rich = load_rich()
    out = io.StringIO()
    console = rich.console.Console(
        file=out,
        width=width or terminal_width(),
        color_system=None,
        force_terminal=False,
        highlight=False,
    )
    for t in tables:
        console.print(t)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _rich_table(panel: Panel, width: int) -> Any:
    rich = load_rich()
    t = rich.table.Table(
        title=panel.title,
        title_justify="left",
        min_width=min(len(panel.title), width),
        box=rich.box.SIMPLE_HEAD,  # no side borders
    )
    for i, name in enumerate(panel.header):
        # whole where the layout fits; a cell wider than the width is wrapped, never cut
        t.add_column(name, justify="left" if i < panel.n_labels else "right", overflow="fold")
    for row in panel.rows:
        t.add_row(*row)
    return t


def transposed(panel: Panel, column: str) -> Panel:
    """``panel`` turned: a row per column label (under ``column``, the key they are
    values of), a column per row (its labels joined by spaces, the blank ones left out)."""
    header = (
        column,
        *(" ".join(label for label in r[: panel.n_labels] if label) for r in panel.rows),
    )
    rows = tuple(
        (label, *(r[panel.n_labels + i] for r in panel.rows))
        for i, label in enumerate(panel.header[panel.n_labels :])
    )
    return Panel(panel.title, 1, header, rows)


def split(panel: Panel, parts: int) -> list[Panel]:
    """``panel``'s value columns in ``parts`` runs of near-equal length, each with the row
    labels, titled with the columns it holds (``... (64 (L) to 256 (4L))``)."""
    n = panel.n_labels
    values = len(panel.header) - n
    bounds = [n + values * k // parts for k in range(parts + 1)]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        first, last = panel.header[lo], panel.header[hi - 1]
        where = first if lo == hi - 1 else f"{first} to {last}"
        header = (*panel.header[:n], *panel.header[lo:hi])
        rows = tuple((*r[:n], *r[lo:hi]) for r in panel.rows)
        out.append(Panel(f"{panel.title} ({where})", n, header, rows))
    return out


def spread(panel: Panel) -> Panel:
    """``panel`` with each cell's ``± std`` on a line under its mean: narrower columns."""
    n = panel.n_labels
    rows = tuple((*r[:n], *(c.replace(" ± ", "\n± ") for c in r[n:])) for r in panel.rows)
    return Panel(panel.title, n, panel.header, rows)


def layouts(panel: Panel, column: str) -> Iterator[list[Panel]]:
    """The ways a panel is laid out on a terminal, best first: as it is; turned
    (:func:`transposed`: a curve over 16 gold positions reads down 16 rows); each of
    those with its spreads under its means (:func:`spread`); its value columns split over
    2, 3, ... tables (:func:`split`), down to one column each."""
    turned = transposed(panel, column)
    yield from ([panel], [turned], [spread(panel)], [spread(turned)])
    for parts in range(2, len(panel.header) - panel.n_labels + 1):
        yield split(panel, parts)


def fitted(panel: Panel, column: str, width: int) -> list[Any]:
    """rich tables of ``panel`` no wider than ``width``: the first of :func:`layouts`
    whose every table fits (the last, one value column a table, with its cells wrapped,
    where none does)."""
    rich = load_rich()
    # measured on a console wide enough for any table: rich clamps a measure to its width
    console = rich.console.Console(width=UNBOUNDED, color_system=None, force_terminal=False)
    tables: list[Any] = []
    for option in layouts(panel, column):
        tables = [_rich_table(p, width) for p in option]
        measured = (rich.measure.Measurement.get(console, console.options, t) for t in tables)
        if max(m.maximum for m in measured) <= width:
            break
    return tables


def table(
    results: Mapping[str, Any], experiment: str | None = None, width: int | None = None
) -> str:
    """The run's numbers as text tables, no colour codes, each no wider than ``width``
    columns (default: :func:`terminal_width`, 80 off a terminal): every experiment present
    (or only ``experiment``), one table per panel (e.g. per mode), turned or split where it
    would be wider (:func:`fitted`). Extrapolation: rows encodings, columns eval lengths (L,
    2L, ...), cells mean perplexity ± std over seeds, ``cannot run`` where it could not."""
    if experiment is not None and experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; expected one of {NAMES}")
    if width is not None:
        check_int("width", width)
    width = width or terminal_width()
    names = [experiment] if experiment is not None else list(EXPERIMENTS)
    tables = [
        t
        for name in names
        for p in panels(results, name)
        for t in fitted(p, EXPERIMENTS[name].layout.column.replace("_", " "), width)
    ]
    if not tables:
        which = experiment or "any experiment"
        return f"no measurements for {which}\n"
    return render(tables, width)
