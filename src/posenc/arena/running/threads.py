"""``--threads``: torch's intra-op threads for one arena run, and keeping them on resume.

torch starts one intra-op thread per core. One run alone on a machine is fastest that way;
two runs (or a run and any other busy process) on the same cores each still start one
thread per core, the threads wait on each other at every operation, and each run slows
7-15x (oversubscription). ``--threads N`` gives each run its share of the cores.

The thread count decides the numbers bit for bit (the order of float sums), so a run's
configuration records it (``torch_threads`` in ``run.json``), and a resumed run uses the
recorded count unless it is given another one, which is refused like any other change.

Only the intra-op threads are set: the arena runs no inter-op work (no ``torch.jit.fork``),
and torch takes ``set_num_interop_threads`` once per process, before any parallel work,
so it could not be restored after an in-process run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ...arguments import check_int
from ..files.atomic import read_json

__all__ = ["THREADS", "check_threads", "recorded_threads", "using_threads"]

#: the name of the option, in every message about it
THREADS = "threads (--threads)"
#: the key of the thread count in a run's configuration (``run.json``)
KEY = "torch_threads"


def check_threads(threads: Any) -> None:
    """Raise ``TypeError`` unless ``threads`` is None or an int, ``ValueError`` unless it
    is at least 1; both messages name ``--threads``."""
    if threads is not None:
        check_int(THREADS, threads, minimum=1)


def recorded_threads(run_dir: Path) -> int | None:
    """The thread count the run in ``run_dir`` was started with (its ``run.json``), or
    None when the directory holds no run yet (or one written before it was recorded)."""
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return None
    value = read_json(path).get("config", {}).get(KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@contextmanager
def using_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` inside the block and restored after it
    (None: left as they are)."""
    check_threads(threads)
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
