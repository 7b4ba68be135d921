"""The arena's experiments, one module each, collected in :data:`EXPERIMENTS` in report order.

Each module declares its experiment once, as ``EXPERIMENT``, an :class:`~.base.Experiment`:
its name, how it runs, its table layout, its figure, its titles and its summary sentences.
The run, the tables, the figures, the summary and the report iterate over
:data:`EXPERIMENTS`; nothing else names an experiment.

To add an experiment:

1. write ``experiments/<name>.py`` with ``run(ctx)`` (its units: ``ctx.unit(...)``, models
   through ``ctx.trained(...)``), ``figure(rows)`` and ``summary(rows)`` (both read a
   :class:`~posenc.arena.reporting.rows.Rows`), and ``EXPERIMENT = Experiment(...)``;
2. add ``<name>.EXPERIMENT`` to the tuple below, where its section of the report goes;
3. write ``tests/arena/test_<name>.py``.

``posenc arena run <name>``, ``results.json``, the terminal table, ``report.html`` and
``posenc arena compare`` then include it.
"""

from __future__ import annotations

from . import (
    context_extension,
    extrapolation,
    layer_plans,
    length_generalization,
    lost_in_the_middle,
    nope_causality,
)
from .base import Experiment, Layout

__all__ = ["EXPERIMENTS", "NAMES", "Experiment", "Layout", "get"]

#: experiment name -> its record, in the order runs and reports follow
EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        extrapolation.EXPERIMENT,
        layer_plans.EXPERIMENT,
        context_extension.EXPERIMENT,
        length_generalization.EXPERIMENT,
        nope_causality.EXPERIMENT,
        lost_in_the_middle.EXPERIMENT,
    )
}
#: the experiments' names, in report order
NAMES: tuple[str, ...] = tuple(EXPERIMENTS)


def get(name: str) -> Experiment:
    """The record of experiment ``name``.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {[*EXPERIMENTS, 'all']}")
    return EXPERIMENTS[name]
