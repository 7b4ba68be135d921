"""A layer plan as a short table for a terminal: :func:`plan_table`.

:meth:`LayerPlan.__str__ <posenc.models.LayerPlan.__str__>` prints one row per layer; a
model has dozens of layers in a few kinds. Here the layers of one kind share a row, named
as a set (``0-2, 4-6, ..., 44-46``, ``every 4th from 3``); a column every layer leaves at
its default (full attention, no sinks, no softcap, no temperature) is left out; and
where the table would not fit the width, each long encoding is a short label
(``rope [1]``) spelled out in a legend below it, wrapped to the width.
"""

from __future__ import annotations

import itertools
import textwrap

from ...models.plan import LayerPlan
from ...models.spec import describe_encoding

__all__ = ["layer_set", "plan_table"]

#: the columns of LayerSpec.row(), and the value of each column shown only where a layer
#: has another
_COLUMNS = ("encoding", "pattern", "sinks", "softcap", "temperature")
_UNSET = {"pattern": "full", "sinks": "no", "softcap": "-", "temperature": "-"}


def _ordinal(n: int) -> str:
    """``2nd``, ``3rd``, ``4th``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """The sorted ``indices`` as runs of consecutive numbers, ``(first, last)`` each."""
    runs: list[tuple[int, int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _run(run: tuple[int, int]) -> str:
    return str(run[0]) if run[0] == run[1] else f"{run[0]}-{run[1]}"


def layer_set(indices: list[int], n_layers: int) -> str:
    """A set of layer indices (of ``n_layers``) in a few words: one run (``0-47``), every
    ``s``-th layer (``every 4th from 3``; ``..., to 31`` where it stops before the last
    layer), a repeating run (``0-2, 4-6, ..., 44-46``: the same run every period, the
    last one maybe cut short), or else every run.

    Example:
        >>> layer_set([3, 7, 11, 15], 16), layer_set([0, 1, 2, 4, 5, 6, 8, 9, 10], 12)
        ('every 4th from 3', '0-2, 4-6, 8-10')
        >>> layer_set([i for i in range(48) if i % 4 != 3], 48)
        '0-2, 4-6, ..., 44-46'
    """
    runs = _runs(indices)
    if len(runs) <= 3:
        return ", ".join(_run(r) for r in runs)
    starts = {b[0] - a[0] for a, b in itertools.pairwise(runs)}
    lengths = [last - first for first, last in runs]
    if len(starts) != 1 or len(set(lengths[:-1])) != 1 or lengths[-1] > lengths[0]:
        return ", ".join(_run(r) for r in runs)
    step = starts.pop()
    if lengths[0] == 0:
        end = "" if runs[-1][0] + step >= n_layers else f" to {runs[-1][0]}"
        return f"every {_ordinal(step)} from {runs[0][0]}{end}"
    return f"{_run(runs[0])}, {_run(runs[1])}, ..., {_run(runs[-1])}"


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, a rule under the header."""
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def plan_table(plan: LayerPlan, width: int = 76) -> list[str]:
    """``plan`` as table lines no wider than ``width`` (where its cells allow): one row per
    kind of layer, first layer first.

    Example:
        >>> print("\\n".join(plan_table(LayerPlan.nope_every(16, 4, "rope"))))
        layers                encoding
        --------------------  --------
        0-2, 4-6, ..., 12-14  rope
        every 4th from 3      nope
    """
    kinds: dict[tuple[str, ...], list[int]] = {}
    for i, spec in enumerate(plan):
        kinds.setdefault(tuple(spec.row()), []).append(i)
    shown = [
        c
        for c, name in enumerate(_COLUMNS)
        if name not in _UNSET or any(row[c] != _UNSET[name] for row in kinds)
    ]
    header = ["layers", *(_COLUMNS[c] for c in shown)]
    rows = [[layer_set(idx, len(plan)), *(row[c] for c in shown)] for row, idx in kinds.items()]
    lines = _grid(header, rows)
    if max(len(line) for line in lines) > width:
        lines = _with_legend(header, rows, width)
    if plan.input is not None:
        lines.append(f"input: {describe_encoding(plan.input)}")
    return lines


def _with_legend(header: list[str], rows: list[list[str]], width: int) -> list[str]:
    """The table with each encoding longer than its name a label (``rope [1]``), and the
    legend of the labels below it, each wrapped to ``width``."""
    labels: dict[str, str] = {}
    for row in rows:
        name = row[1].split(" ", 1)[0]
        if row[1] != name:
            label = labels.setdefault(row[1], f"{name} [{len(labels) + 1}]")
            row[1] = label
    lines = _grid(header, rows)
    for text, label in labels.items():
        key = label.split(" ", 1)[1]
        lines += textwrap.wrap(f"{key} {text}", width, subsequent_indent="    ")
    return lines
