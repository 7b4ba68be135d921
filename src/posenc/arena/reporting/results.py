"""A run's results file: its records as ``results.json`` and ``results.csv``, checked on the
way in and out (the records themselves and their aggregation are :mod:`.records`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..experiments import NAMES as EXPERIMENTS
from ..files.atomic import atomic_write_json, atomic_write_text
from .records import BASE_FIELDS

__all__ = [
    "FORMAT",
    "check_measurement",
    "load_results",
    "machine",
    "make_results",
    "to_csv",
    "versions",
    "write_results",
]

FORMAT = 1
_REQUIRED = ("experiment", "encoding", "seed", "train_length", "eval_length", "metric", "value")


def check_measurement(record: Any, where: str = "measurement") -> None:
    """``ValueError`` unless ``record`` is a dict with the required keys and a valid value."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a dict, got {type(record).__name__}")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise ValueError(f"{where}: missing keys {missing} (has {sorted(record)})")
    if record["experiment"] not in EXPERIMENTS:
        raise ValueError(
            f"{where}: unknown experiment {record['experiment']!r}; expected one of {EXPERIMENTS}"
        )
    value = record["value"]
    if value is None:
        if not record.get("note"):
            raise ValueError(f"{where}: value None needs a note saying why it cannot run")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: value must be a number or None, got {value!r}")


def versions() -> dict[str, str]:
    """The versions that decide a run's numbers: posenc, torch, Python, NumPy."""
    from importlib.metadata import version

    import numpy
    import torch

    return {
        "posenc": version("posenc"),
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
    }


def machine() -> dict[str, Any]:
    """The machine: platform, CPU model, cores and torch's threads."""
    import torch

    from ...system import cpu_info

    return {
        "platform": platform.platform(),
        "processor": cpu_info()[0],
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def make_results(
    config: Mapping[str, Any],
    command: Sequence[str],
    experiments: Sequence[str],
    measurements: Sequence[Mapping[str, Any]],
    timings: Mapping[str, Mapping[str, float]],
) -> dict[str, Any]:
    """The ``results.json`` document of a run: the inputs plus ``format``, ``versions`` and
    ``machine``. Measurements keep their order; an unknown experiment or a malformed record
    is a ``ValueError``."""
    for name in experiments:
        if name not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {name!r}; expected one of {EXPERIMENTS}")
    records = [dict(m) for m in measurements]
    for i, record in enumerate(records):
        check_measurement(record, f"measurement {i}")
    return {
        "format": FORMAT,
        "config": dict(config),
        "command": list(command),
        "versions": versions(),
        "machine": machine(),
        "timings": {k: dict(v) for k, v in timings.items()},
        "experiments": list(experiments),
        "measurements": records,
    }


def to_csv(measurements: Iterable[Mapping[str, Any]]) -> str:
    """The records as CSV: the base keys first, then the other keys sorted; ``None`` or a
    missing key is an empty cell. Floats are written with ``repr`` (they read back exactly)."""
    records = list(measurements)
    extras = sorted({k for r in records for k in r} - set(BASE_FIELDS))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = [*BASE_FIELDS, *extras]
    writer.writerow(header)
    for r in records:
        writer.writerow(["" if r.get(k) is None else r[k] for k in header])
    return out.getvalue()


def write_results(run_dir: str | Path, results: Mapping[str, Any]) -> None:
    """Write ``results.json`` and ``results.csv`` into ``run_dir``, each atomically."""
    run_dir = Path(run_dir)
    atomic_write_json(run_dir / "results.json", dict(results))
    atomic_write_text(run_dir / "results.csv", to_csv(results["measurements"]))


def load_results(run_dir_or_file: str | Path) -> dict[str, Any]:
    """The results in a run directory (its ``results.json``) or in a results file.
    ``ValueError`` naming the path when it is missing or not an arena results file."""
    path = Path(run_dir_or_file)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise ValueError(f"{path}: no such results file (expected a run directory or results.json)")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a results file (invalid JSON: {e})") from None
    if not isinstance(results, dict) or "measurements" not in results:
        raise ValueError(f"{path}: not an arena results file (no 'measurements')")
    if results.get("format") != FORMAT:
        raise ValueError(
            f"{path}: results format {results.get('format')!r}, this posenc reads format {FORMAT}"
        )
    if not isinstance(results["measurements"], list):
        raise ValueError(f"{path}: 'measurements' must be a list")
    for i, record in enumerate(results["measurements"]):
        check_measurement(record, f"{path}: measurement {i}")
    return results
