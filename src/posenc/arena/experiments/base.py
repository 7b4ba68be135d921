"""The record of one arena experiment: everything the runner and the report need from it.

An experiment module defines one :class:`Experiment` (``EXPERIMENT``) and the functions it
names; :data:`posenc.arena.experiments.EXPERIMENTS` lists the records in report order, and
the run, the tables, the figures, the summary and the report iterate over that list, so no
other module names an experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..reporting.rows import Rows
    from ..running.context import RunContext

__all__ = ["Experiment", "Layout"]


@dataclass(frozen=True)
class Layout:
    """How an experiment's numbers are laid out in tables.

    Attributes:
        panels: one table per value of these keys (``("mode",)``: a table per mode).
        column: the key spread over the columns (``"eval_length"``).
        hide: keys that follow from the column, so they are not row labels.
        metrics: the metrics its tables and figure prefer, best first; the first one
            measured is the experiment's primary metric.
        also: further metrics shown in tables of their own.
        multiples: label ``eval_length`` columns as multiples of the training length
            (``128 (2L)``) when the run has one training length.
    """

    panels: tuple[str, ...]
    column: str
    hide: tuple[str, ...]
    metrics: tuple[str, ...]
    also: tuple[str, ...] = ()
    multiples: bool = False


@dataclass(frozen=True)
class Experiment:
    """One experiment, declared once in its own module.

    Attributes:
        name: the name on the command line and in every record (``"extrapolation"``).
        title: the heading of its section of the report.
        run: measures it: adds its units to the run (``run(ctx)``, ctx a
            :class:`~posenc.arena.running.context.RunContext`).
        layout: its tables.
        figure: its matplotlib ``Figure`` from its rows of a run (a
            :class:`~posenc.arena.reporting.rows.Rows`).
        alt: the figure's alternative text in the report.
        summary: its "What this run says" sentences from its rows of a run.
    """

    name: str
    title: str
    run: Callable[[RunContext], None]
    layout: Layout
    figure: Callable[[Rows], Any]
    alt: str
    summary: Callable[[Rows], list[str]]
