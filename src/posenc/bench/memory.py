"""Peak memory of a call on CPU: the resident high-water mark above the resident size
before it (Linux ``/proc``).

``/proc/self/clear_refs`` (writing ``5``) resets ``VmHWM`` to the current resident size, so
the high-water mark after the call, minus the resident size before it, is what the call
added at its peak. That is only the call's own when earlier allocations do not linger in
the heap: glibc raises its mmap threshold after a large free, and then keeps later buffers
of that size resident. :func:`in_subprocess` therefore measures in a fresh interpreter with
``MALLOC_MMAP_THRESHOLD_`` fixed, where every buffer over 64 KiB is mapped on allocation and
returned to the system when freed, and where timings taken elsewhere are not disturbed.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "MMAP_THRESHOLD",
    "available",
    "available_bytes",
    "in_subprocess",
    "peak_extra_mib",
    "peaks_mib",
    "ratio",
]

#: glibc's fixed mmap threshold in the measuring process (bytes)
MMAP_THRESHOLD = 65536


def _status_mib(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise OSError(f"{field} not in /proc/self/status")


def available() -> bool:
    """Whether this process can reset and read its resident high-water mark."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        _status_mib("VmHWM")
    except OSError:
        return False
    return True


def available_bytes() -> int | None:
    """The memory the system could still give (``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def ratio(value: Any, floor: Any) -> float | None:
    """``value / floor`` when both were measured (floats) and the floor is above zero.

    >>> ratio(3.0, 2.0), ratio(None, 2.0), ratio(1.0, 0.0)
    (1.5, None, None)
    """
    if isinstance(value, float) and isinstance(floor, float) and floor > 0:
        return value / floor
    return None


def peak_extra_mib(fn: Callable[[], Any]) -> float:
    """MiB that one call of ``fn`` added to the resident memory at its peak (>= 0). Call
    ``fn`` once before, untimed and unmeasured, so lazy allocations are not counted."""
    gc.collect()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # VmHWM := VmRSS
    before = _status_mib("VmRSS")
    fn()
    return max(0.0, _status_mib("VmHWM") - before)


def peaks_mib(calls: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """:func:`peak_extra_mib` of each call (name -> MiB), after one call of it neither timed
    nor measured (lazy allocations, compiled kernels and cached masks are not the call's).

    For a measuring child: everything alive before is frozen out of the garbage collector
    first (``gc.freeze``), so the collection each measurement starts with scans only what
    the calls made. With transformers imported a full collection took 0.2 s, and the tiny
    bench's child spent half its 10 s in them. What is frozen is never collected.
    """
    gc.collect()
    gc.freeze()
    out = {}
    for name, call in calls.items():
        call()
        out[name] = peak_extra_mib(call)
    return out


def in_subprocess(
    module: str, specs: Sequence[dict[str, Any]], timeout: float | None = None
) -> list[dict[str, Any]]:
    """Run ``python -m <module> --memory`` with ``specs`` as JSON on its stdin and
    ``MALLOC_MMAP_THRESHOLD_`` fixed; the module prints one JSON object per spec.

    Returns one dict per spec: what the child printed, or ``{"error": ...}`` for the specs
    it did not reach (killed for memory, a crash, the timeout).
    """
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, "--memory"],
            input=json.dumps(list(specs)),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        stdout, reason = done.stdout, f"exit code {done.returncode}"
        if done.returncode and done.stderr.strip():
            reason += ": " + done.stderr.strip().splitlines()[-1][:160]
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        stdout = out.decode() if isinstance(out, bytes) else out
        reason = f"timed out after {timeout} s"
    results: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        try:
            results.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    results = results[: len(specs)]
    return results + [{"error": reason}] * (len(specs) - len(results))
