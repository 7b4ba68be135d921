"""The arena's figures: each experiment's own
(:attr:`~posenc.arena.experiments.base.Experiment.figure`), a matplotlib ``Figure`` of its
primary metric aggregated over seeds (mean line, shaded min-max band over seeds where
several ran), drawn from a run's measurements by :func:`figure`.

matplotlib is imported only while a figure is drawn, so importing this module needs
nothing optional.
"""

from __future__ import annotations

from typing import Any

from ..experiments import EXPERIMENTS, NAMES
from .panels import experiment_rows
from .plotting import png_bytes
from .records import Records

__all__ = ["figure", "png_bytes"]


def figure(experiment: str, measurements: Records) -> Any:
    """The figure of ``experiment`` (a name in ``EXPERIMENTS``) from a run's
    ``measurements`` (records, any seeds)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; expected one of {NAMES}")
    return EXPERIMENTS[experiment].figure(experiment_rows(measurements, experiment))
