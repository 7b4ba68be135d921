"""A finished run's numbers for readers outside the arena (the guide): one call,
:func:`read_measurements`, and the judgements the run's own report makes, so a reader and
the report never judge the same numbers two ways."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..experiments import extrapolation, lost_in_the_middle
from ..experiments.extrapolation import Extrapolation
from ..experiments.kv_curves import Curve
from .panels import experiment_rows
from .results import load_results

__all__ = ["Measurements", "read_measurements"]


@dataclass(frozen=True)
class Measurements:
    """The results of one arena run, read as its report reads them.

    Attributes:
        results: the run's ``results.json`` document (checked by
            :func:`~.results.load_results`).
    """

    results: Mapping[str, Any]

    def rows(
        self, experiment: str, metric: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """An experiment's rows aggregated over seeds (mean, std, n, ...), of ``metric``
        (default: the primary metric of its table), and that metric; ``([], ...)`` when the
        run did not measure it. ``ValueError`` for an unknown experiment."""
        return experiment_rows(self.results["measurements"], experiment).metric(metric)

    def extrapolations(self) -> list[Extrapolation]:
        """Each encoding's extrapolation as the report judges it (chunks mode, else sliding),
        in run order; ``[]`` without the experiment."""
        rows = experiment_rows(self.results["measurements"], extrapolation.NAME)
        return extrapolation.extrapolations(rows)

    def kv_curves(self) -> tuple[list[Curve], str | None]:
        """The run's lost-in-the-middle curves (every query placement and number of pairs),
        and their metric; ``([], None)`` without the experiment."""
        rows = experiment_rows(self.results["measurements"], lost_in_the_middle.NAME)
        return lost_in_the_middle.kv_curves(rows)


def read_measurements(run: str | Path) -> Measurements:
    """The numbers of the arena run in ``run`` (a run directory or its ``results.json``).

    Raises:
        ValueError: naming the path when it is missing or not an arena results file.
    """
    return Measurements(load_results(run))
