"""A finished run's numbers for readers outside the arena (the guide): one call,
:func:`read_measurements`, and the judgements the run's own report makes, so a reader and
the report never judge the same numbers two ways."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..experiments import extrapolation, lost_in_the_middle
from ..experiments.extrapolation import Extrapolation
from ..experiments.kv_curves import Curve
from .panels import experiment_rows
from .results import load_results
from .rows import significant

__all__ = ["LANGUAGE_MODELS", "NOT_LEARNED", "Measurements", "not_learned", "read_measurements"]

#: the experiments whose models are byte-level language models, judged by their perplexity
LANGUAGE_MODELS = ("extrapolation", "context-extension", "nope-needs-causality")
#: a language model whose perplexity at its training length is at least this fraction of
#: the vocabulary did not learn: a uniform guess over the 256 bytes scores 256 (the tiny
#: preset, a pipeline check, ends near 350; the standard one near 6)
NOT_LEARNED = 0.5


def not_learned(measurements: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a run's language models did not learn, or None when they did: the median of their
    perplexities at the training length (extrapolation) at or above :data:`NOT_LEARNED` of
    the vocabulary size. The one rule the report and the guide both apply: neither reads the
    language models' numbers of such a run (a pipeline check) as evidence.

    Args:
        measurements: a run's ``results.json`` measurement records.
    """
    from ..data.batches import VOCAB_SIZE

    rows = experiment_rows(measurements, extrapolation.NAME)
    at_l = [e.at_train for e in extrapolation.extrapolations(rows) if e.at_train is not None]
    if not at_l or statistics.median(at_l) < NOT_LEARNED * VOCAB_SIZE:
        return None
    median = significant(statistics.median(at_l))
    return (
        f"this run's language models did not learn (median perplexity {median} at L, where a "
        f"uniform guess over the {VOCAB_SIZE} bytes scores {VOCAB_SIZE}: a pipeline check "
        f"such as --preset tiny), so its perplexities are not used as evidence"
    )


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

    def not_learned(self) -> str | None:
        """:func:`not_learned` of this run."""
        return not_learned(self.results["measurements"])

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
