"""The arena's "What this run says": sentences computed from a run's numbers (means over
seeds), each experiment's own (:attr:`~posenc.arena.experiments.base.Experiment.summary`),
gathered in report order by :func:`summary`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..experiments import EXPERIMENTS
from .panels import experiment_rows
from .reading import LANGUAGE_MODELS, not_learned

__all__ = ["summary"]


def summary(results: Mapping[str, Any]) -> list[str]:
    """The "What this run says" sentences of every experiment, in report order (an
    experiment without measurements says nothing), after one that says so when the run has
    a single seed (an ordering is only stated where the seeds separate it). A run whose
    language models did not learn (:func:`~.reading.not_learned`, the rule the guide
    applies too) is said to be a pipeline check first, and their experiments say nothing."""
    measurements = results["measurements"]
    unlearned = not_learned(measurements)
    sentences = [
        sentence
        for name, record in EXPERIMENTS.items()
        if not (unlearned and name in LANGUAGE_MODELS)
        for sentence in record.summary(experiment_rows(measurements, name))
    ]
    seeds = {r.get("seed") for r in measurements}
    if sentences and len(seeds) == 1:
        sentences.insert(
            0, "This run has one seed: no gap below is judged against a spread over seeds."
        )
    if unlearned:
        sentences.insert(0, f"A pipeline check, not evidence: {unlearned}.")
    return sentences
