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
    experiment without measurements says nothing)."""
    return [
        sentence
        for name, record in EXPERIMENTS.items()
        for sentence in record.summary(experiment_rows(results["measurements"], name))
    ]
