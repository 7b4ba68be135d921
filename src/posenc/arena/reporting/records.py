"""A run's measurements and their aggregation over seeds.

A measurement is a plain dict: ``experiment``, ``encoding``, ``seed``, ``train_length``,
``eval_length``, ``metric``, ``value`` (``None`` where the case cannot run, with a ``note``
saying why) and extra identity keys such as ``mode``, ``scaling``, ``factor``, ``stage``,
``task``, ``gold_position``, ``n_pairs``. Every key but ``seed``, ``value`` and ``note`` is
part of what a measurement measures; :func:`aggregate` groups by those keys. Nothing here
knows an experiment by name.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "AGGREGATE_FIELDS",
    "BASE_FIELDS",
    "KEY_FIELDS",
    "NON_KEY_FIELDS",
    "Key",
    "Records",
    "aggregate",
    "measurement_key",
]

# The keys every record has (``note`` only where ``value`` is None), in CSV column order.
BASE_FIELDS = (
    "experiment",
    "encoding",
    "seed",
    "train_length",
    "eval_length",
    "metric",
    "value",
    "note",
)
# What varies between seeds of one measurement; every other key is its identity.
NON_KEY_FIELDS = ("seed", "value", "note")
# The identity keys the experiments use, in display order. A record's identity is all its
# keys but NON_KEY_FIELDS, so an extra key not listed here still tells measurements apart.
KEY_FIELDS = (
    "experiment",
    "encoding",
    "train_length",
    "eval_length",
    "metric",
    "mode",
    "scaling",
    "factor",
    "stage",
    "task",
    "gold_position",
    "n_pairs",
)
# What aggregate() adds to a measurement's identity keys.
AGGREGATE_FIELDS = ("mean", "std", "n", "seeds", "values")
Key = tuple[tuple[str, Any], ...]
#: a run's measurements, in any iterable
Records = Iterable[Mapping[str, Any]]


def measurement_key(record: Mapping[str, Any]) -> Key:
    """The identity of ``record`` (or of a row of :func:`aggregate`) apart from its seed: its
    keys but ``seed``/``value``/``note`` (and the aggregate's own), sorted, with their values."""
    return tuple(
        sorted((k, v) for k, v in record.items() if k not in NON_KEY_FIELDS + AGGREGATE_FIELDS)
    )


def aggregate(measurements: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per measurement (records grouped by :func:`measurement_key`), in the order
    each was first produced: its identity keys plus ``mean`` and ``std`` (sample standard
    deviation, 0 for one value) over the seeds that ran, ``n`` (how many ran), ``seeds`` and
    ``values`` (aligned, ``None`` where a seed could not run). A group where nothing ran has
    ``mean``/``std`` ``None`` and the first ``note``."""
    groups: dict[Key, list[Mapping[str, Any]]] = {}
    for record in measurements:
        groups.setdefault(measurement_key(record), []).append(record)
    rows = []
    for members in groups.values():
        first = members[0]
        row: dict[str, Any] = {k: v for k, v in first.items() if k not in NON_KEY_FIELDS}
        values = [m["value"] for m in members]
        ran = [float(v) for v in values if v is not None]
        row["mean"] = statistics.fmean(ran) if ran else None
        row["std"] = (statistics.stdev(ran) if len(ran) > 1 else 0.0) if ran else None
        row["n"] = len(ran)
        row["seeds"] = [m["seed"] for m in members]
        row["values"] = values
        notes = [m["note"] for m in members if m.get("note")]
        if notes:
            row["note"] = notes[0]
        rows.append(row)
    return rows
