"""Arena comparison of two runs: for each measurement both have, mean A, mean B and B/A (a
table per experiment, no wider than the terminal, 80 columns off one), then the
measurements only one run has (``posenc arena compare``).

``rich`` (the terminal table) is imported only when :func:`compare` runs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from ..experiments import NAMES
from .panels import format_cell, load_rich, render, terminal_width
from .records import AGGREGATE_FIELDS, KEY_FIELDS, NON_KEY_FIELDS, Key, aggregate, measurement_key

__all__ = ["compare", "describe"]


def describe(row: Mapping[str, Any]) -> str:
    """A measurement's identity (but its experiment) as ``key=value`` words."""
    keys = [k for k in KEY_FIELDS if k in row and k != "experiment"]
    keys += sorted(
        k for k in row if k not in KEY_FIELDS and k not in NON_KEY_FIELDS + AGGREGATE_FIELDS
    )
    return " ".join(f"{k}={row[k]}" for k in keys)


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Two runs side by side: for each measurement in both, mean A, mean B and B/A; then the
    measurements only one run has. Ordered by experiment (canonical order), then as run A
    produced them."""
    rows_a = {measurement_key(r): r for r in aggregate(a["measurements"])}
    rows_b = {measurement_key(r): r for r in aggregate(b["measurements"])}

    def order(item: tuple[int, Key]) -> tuple[int, int]:
        i, key = item
        return (NAMES.index(dict(key)["experiment"]), i)

    both = sorted(((i, k) for i, k in enumerate(rows_a) if k in rows_b), key=order)
    rich = load_rich()
    tables: dict[str, Any] = {}  # one per experiment: its measurements wrap beside the numbers
    for _, key in both:
        ra, rb = rows_a[key], rows_b[key]
        t = tables.get(ra["experiment"])
        if t is None:
            title = f"{ra['experiment']}: B/A per measurement (mean over seeds)"
            t = tables[ra["experiment"]] = rich.table.Table(title=title, title_justify="left")
            t.add_column("measurement", overflow="fold")
            for name in ("A", "B", "B/A"):
                t.add_column(name, justify="right", no_wrap=True)
        ma, mb = ra["mean"], rb["mean"]
        ratio = "" if ma is None or mb is None or ma == 0 else f"{mb / ma:.3f}"
        t.add_row(describe(ra), format_cell(ra), format_cell(rb), ratio)
    width = terminal_width()
    text = render(list(tables.values()), width)
    for label, mine, other in [("A", rows_a, rows_b), ("B", rows_b, rows_a)]:
        only = sorted(
            ((i, k) for i, k in enumerate(mine) if k not in other),
            key=order,
        )
        if only:
            text += f"only in {label}:\n"
            for _, k in only:
                line = f"{mine[k]['experiment']} {describe(mine[k])}: {format_cell(mine[k])}"
                wrapped = textwrap.wrap(line, width, initial_indent="  ", subsequent_indent="    ")
                text += "".join(f"{part}\n" for part in wrapped)
    return text
