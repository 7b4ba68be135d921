"""One experiment's rows of a run, as its figure and its summary read them.

:class:`Rows` holds the experiment's measurements aggregated over seeds
(:func:`~.records.aggregate`) and the metrics its tables prefer; the reporting modules build
one per experiment and hand it to the experiment's record, so an experiment module never
aggregates records itself. :func:`sort_key` is the order tables and figures show values in.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .records import Records, aggregate

__all__ = ["Rows", "leader", "ordering", "separated", "significant", "sort_key"]

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


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers in order, then known names in their canonical order, then other strings."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    if value in _ORDER:
        return (1, _ORDER.index(value))
    return (2, str(value))


def significant(value: float) -> str:
    """Three significant digits, without an exponent up to a million (thousands whole)."""
    return f"{value:,.0f}" if 1e3 <= abs(value) < 1e6 else f"{value:.3g}"


def _best_first(rows: Sequence[dict[str, Any]], lower: bool) -> list[dict[str, Any]]:
    """The rows that ran, best mean first (ties in their given order)."""
    sign = 1 if lower else -1
    return sorted((r for r in rows if r["mean"] is not None), key=lambda r: sign * r["mean"])


def separated(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two aggregated rows' means differ by more than their seed standard deviations
    added (never with one seed each: there is no spread to judge by)."""
    if max(a["n"], b["n"]) <= 1:
        return False
    return abs(a["mean"] - b["mean"]) > a["std"] + b["std"]


def ordering(
    rows: Sequence[dict[str, Any]],
    *,
    lower: bool = True,
    key: str = "encoding",
    fmt: Callable[[float], str] = significant,
) -> str:
    """``rows`` (one measurement each, means over seeds) best first: ``a 1.2 < b 1.5 ≈ c 1.6``
    (``>`` when higher is better) where :func:`separated`, ``≈`` where not."""
    ran = _best_first(rows, lower)
    if not ran:
        return ""
    text = f"{ran[0][key]} {fmt(ran[0]['mean'])}"
    for a, b in itertools.pairwise(ran):
        sign = ("<" if lower else ">") if separated(a, b) else "≈"
        text += f" {sign} {b[key]} {fmt(b['mean'])}"
    return text


def leader(
    rows: Sequence[dict[str, Any]],
    *,
    lower: bool = True,
    key: str = "encoding",
    fmt: Callable[[float], str] = significant,
) -> str:
    """The best of ``rows`` and whether the seeds support it: ``rope (5.1), ahead of alibi
    (5.6) by more than the seed spread``, ``..., not separated from alibi (5.2) at this
    budget``, or ``..., one seed`` when there is no spread to judge by. Rows with the best
    mean exactly are a tie, named together: ``sinusoidal, rope and t5 tie (1.00), ahead of
    ...``."""
    ran = _best_first(rows, lower)
    if not ran:
        return ""
    best = ran[0]
    tied = [r for r in ran if r["mean"] == best["mean"]]
    if len(tied) > 1:
        names = [str(r[key]) for r in tied]
        text = f"{', '.join(names[:-1])} and {names[-1]} tie ({fmt(best['mean'])})"
    else:
        text = f"{best[key]} ({fmt(best['mean'])})"
    if len(ran) == len(tied):
        return text
    runner = ran[len(tied)]
    if max(best["n"], runner["n"]) <= 1:
        return text + ", one seed"
    gap = "ahead of" if separated(best, runner) else "not separated at this budget from"
    return text + f", {gap} {runner[key]} ({fmt(runner['mean'])})"


@dataclass(frozen=True)
class Rows:
    """An experiment's aggregated rows of one run.

    Attributes:
        experiment: the experiment's name.
        every: its rows of every metric, in the order each was first produced.
        preferred: the metrics its tables prefer, best first (its layout's ``metrics``).
    """

    experiment: str
    every: tuple[dict[str, Any], ...]
    preferred: tuple[str, ...]

    @classmethod
    def of(cls, measurements: Records, experiment: str, preferred: Sequence[str]) -> Rows:
        """The rows of ``experiment`` among a run's ``measurements`` (records, any seeds)."""
        rows = tuple(r for r in aggregate(measurements) if r["experiment"] == experiment)
        return cls(experiment, rows, tuple(preferred))

    @property
    def primary(self) -> str | None:
        """The metric the experiment's table and figure show: the first preferred one that
        was measured, else the first measured; None without rows."""
        present = [r["metric"] for r in self.every]
        for metric in self.preferred:
            if metric in present:
                return metric
        return present[0] if present else None

    def metric(self, metric: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """The rows of ``metric`` (default: :attr:`primary`), and that metric."""
        metric = self.primary if metric is None else metric
        return [r for r in self.every if r["metric"] == metric], metric
