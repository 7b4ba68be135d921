"""The arena's "What this run says": sentences computed from a run's numbers (means over
seeds), each experiment's own (:attr:`~posenc.arena.experiments.base.Experiment.summary`),
gathered in report order by :func:`summary`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..experiments import EXPERIMENTS
from .panels import experiment_rows

__all__ = ["summary"]


def summary(results: Mapping[str, Any]) -> list[str]:
    """The "What this run says" sentences of every experiment, in report order (an
    experiment without measurements says nothing), after one that says so when the run has
    a single seed: an ordering is only stated where the seeds separate it."""
    sentences = [
        sentence
        for name, record in EXPERIMENTS.items()
        for sentence in record.summary(experiment_rows(results["measurements"], name))
    ]
    seeds = {r.get("seed") for r in results["measurements"]}
    if sentences and len(seeds) == 1:
        sentences.insert(
            0, "This run has one seed: no gap below is judged against a spread over seeds."
        )
    return sentences
