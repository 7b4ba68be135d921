"""One experiment's rows of a run, as its figure and its summary read them.

:class:`Rows` holds the experiment's measurements aggregated over seeds
(:func:`~.records.aggregate`) and the metrics its tables prefer; the reporting modules build
one per experiment and hand it to the experiment's record, so an experiment module never
aggregates records itself. :func:`sort_key` is the order tables and figures show values in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .records import Records, aggregate

__all__ = ["Rows", "significant", "sort_key"]

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
