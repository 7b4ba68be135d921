"""The machine record of a benchmark run: what a ratio measured here depends on.

A ratio to the floor does not carry from one machine to another (ALiBi once measured
at 2.2x the floor on one x86 machine and 1.25-1.5x on another), so every result file says
where it was measured: the CPU model and the instruction-set flags that change which
kernels ATen picks, ATen's own choice (``torch.backends.cpu.get_cpu_capability()``, which
``ATEN_CPU_CAPABILITY`` can lower), the cores, their caches and torch's threads, and the
versions.

Example:
    >>> record = machine()
    >>> sorted(record) == sorted(FIELDS)
    True
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from typing import Any

import torch

from ..system import FLAGS, cpu_caches, cpu_info

__all__ = ["FIELDS", "FLAGS", "cpu_info", "cpu_slug", "machine"]

FIELDS = (
    "cpu_model",
    "cpu_flags",
    "cpu_capability",
    "aten_cpu_capability_env",
    "cores",
    "cpu_caches",
    "torch_threads",
    "torch",
    "python",
    "platform",
    "date",
)


def cpu_slug(model: str) -> str:
    """A file-name-safe form of a CPU model: lower case, runs of other characters as ``-``.

    >>> cpu_slug("Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz")
    'intel-r-xeon-r-platinum-8480-2-0ghz'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return slug[:60].rstrip("-") or "unknown-cpu"


def machine(date: datetime.date | None = None) -> dict[str, Any]:
    """The record of :data:`FIELDS` for this process (``date``: today, UTC, by default)."""
    model, flags = cpu_info()
    day = date or datetime.datetime.now(datetime.timezone.utc).date()
    return {
        "cpu_model": model,
        "cpu_flags": flags,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY"),
        "cores": os.cpu_count(),
        "cpu_caches": cpu_caches(),
        "torch_threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": day.isoformat(),
    }
