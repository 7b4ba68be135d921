"""Choices measured on the machine itself, once, and kept: a short calibration, as
inductor's autotuning does for its kernels.

A block size or a path tuned on one CPU does not carry to the next: the CPU flash kernel's
speed against its call overhead, the caches a block must fit and the GEMM library's tiles
differ between an AMD EPYC and an Intel Xeon of the same ISA (issue 56 measured ALiBi's
blockwise path at 0.95x plain attention on the one and 1.4x on the other). :func:`choose`
times each candidate of a choice with the caller's own ``measure`` and keeps the fastest
(the default unless another is faster by :data:`MARGIN`), in memory and in a JSON file
per machine (:func:`cache_path`: the CPU model, its flags and caches, ATen's vector ISA,
torch's version and threads), so a later process reads it instead of measuring again.

``POSENC_CALIBRATE=0`` turns it off: every choice is its default, measured nothing (the
test suite runs so, and a run that must be bitwise the same on another machine may).
``POSENC_CACHE_DIR`` moves the files (default ``~/.cache/posenc``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .system import cpu_caches, cpu_info

__all__ = ["MARGIN", "ROUNDS", "best_time", "cache_path", "choose", "chosen", "enabled"]

#: how much faster than the default another candidate must measure to be chosen: less is
#: read as noise (a shared machine's timings move by a few percent between rounds)
MARGIN = 0.05
#: how many times each candidate is measured, in turns, its fastest kept (one pass in a
#: row let a busy second of a 2-core VM pick a block 1.8x slower than the default)
ROUNDS = 2
#: the calibration file format, part of its name: a new format measures again
VERSION = 1

_lock = threading.Lock()
_chosen: dict[str, int] = {}


def enabled() -> bool:
    """Whether choices are measured (``POSENC_CALIBRATE`` is not ``0``/``false``/``off``)."""
    value = os.environ.get("POSENC_CALIBRATE", "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def cache_path() -> Path:
    """The file of this machine's choices: ``<POSENC_CACHE_DIR or ~/.cache/posenc>/
    calibration-<fingerprint>.json``, the fingerprint a hash of what a timing depends on."""
    model, flags = cpu_info()
    facts = [
        VERSION,
        model,
        flags,
        sorted(cpu_caches().items()),
        torch.backends.cpu.get_cpu_capability(),
        str(torch.__version__),
        torch.get_num_threads(),
    ]
    digest = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
    root = os.environ.get("POSENC_CACHE_DIR") or Path.home() / ".cache" / "posenc"
    return Path(root) / f"calibration-{digest}.json"


def choose(
    key: str, candidates: Sequence[int], default: int, measure: Callable[[int], float]
) -> int:
    """The candidate this machine runs fastest for ``key``: kept in memory and in
    :func:`cache_path`, else measured now with ``measure(candidate) -> seconds`` (the
    smallest of a few timings is what it should return) and kept. ``default`` wins unless
    another measures faster by :data:`MARGIN`; with calibration off (:func:`enabled`),
    and while ``torch.compile`` traces, it is returned without measuring.

    Args:
        key: what is chosen and for which sizes, e.g. ``"distance_block/L1024/d64"``.
        candidates: the values to try (``default`` is tried too).
        default: the value without calibration.
        measure: times one candidate, in seconds.
    """
    if not enabled() or torch.compiler.is_compiling():
        return default
    with _lock:
        if key in _chosen:
            return _chosen[key]
        path = cache_path()
        kept = _read(path)
        if key in kept and kept[key] in (*candidates, default):
            _chosen[key] = kept[key]
            return kept[key]
        times = dict.fromkeys((default, *candidates), math.inf)
        for _ in range(ROUNDS):  # interleaved: a slow spell falls on every candidate alike
            for candidate in times:
                times[candidate] = min(times[candidate], measure(candidate))
        best = min(times, key=times.__getitem__)
        chosen = best if times[best] < (1 - MARGIN) * times[default] else default
        _chosen[key] = chosen
        _write(path, {**_read(path), key: chosen})
        return chosen


def best_time(run: Callable[[], object], rounds: int = 2) -> float:
    """The fastest of ``rounds`` timings of ``run()`` after one warm-up, in seconds: what a
    ``measure`` of :func:`choose` returns (other work on the machine only adds time)."""
    run()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def chosen() -> dict[str, int]:
    """The choices this process has made or read so far, by key (a benchmark records them
    beside its timings)."""
    with _lock:
        return dict(sorted(_chosen.items()))


def _read(path: Path) -> dict[str, int]:
    """The choices in ``path``; {} if it is missing or not this format (measured again)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and type(v) is int}


def _write(path: Path, choices: dict[str, int]) -> None:
    """Write ``choices`` atomically (a temporary file renamed over it); a folder that cannot
    be written keeps them in memory only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
            json.dump(choices, f, indent=1, sort_keys=True)
        os.replace(f.name, path)
    except OSError:
        pass
