"""The machine a measurement ran on, as the tools that record one read it: the CPU model and
its vector-instruction flags from ``/proc/cpuinfo``, and its caches from sysfs. Standard
library only, so that both the benchmarks (:mod:`posenc.bench.machine`) and the arena's
results read it without importing each other.
"""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["CACHES", "FLAGS", "cpu_caches", "cpu_info"]

#: where Linux describes the caches the first core sees: ``index*/{level,type,size}``
CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
#: the short name of a cache by its sysfs type
_KINDS = {"Data": "d", "Instruction": "i", "Unified": ""}

#: the /proc/cpuinfo flags that decide the vector kernels (AVX2/AVX-512/AMX, FMA, F16C)
FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "avx512_vnni",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)


def cpu_info(text: str | None = None) -> tuple[str, list[str]]:
    """The CPU model and the flags of :data:`FLAGS` it has, from ``/proc/cpuinfo`` (or
    ``text`` in its format); the model falls back to ``platform.processor()``.

    >>> cpu_info("model name\\t: Some CPU\\nflags\\t\\t: fpu avx2 fma sse\\n")
    ('Some CPU', ['avx2', 'fma'])
    """
    if text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                text = f.read()
        except OSError:
            text = ""
    model: str | None = None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:  # x86, then ARM
            flags = set(value.split())
    model = model or platform.processor() or platform.machine() or "unknown"
    return model, [f for f in FLAGS if f in flags]


def cpu_caches(root: str | Path | None = None) -> dict[str, int]:
    """The sizes in bytes of the caches the first core sees, by name (``L1d``, ``L1i``,
    ``L2``, ``L3``), read from ``root`` (default :data:`CACHES`); empty where it cannot be
    read (not Linux, a container that hides it). Block sizes tuned on one machine depend on
    these: a 1 MiB L2 and a 2 MiB one hold different blocks.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (2, "Unified", "2048K")]):
    ...     (root / f"index{i}").mkdir()
    ...     for name, value in (("level", level), ("type", kind), ("size", size)):
    ...         _ = (root / f"index{i}" / name).write_text(f"{value}\\n")
    >>> cpu_caches(root)
    {'L1d': 49152, 'L2': 2097152}
    """
    found: dict[str, int] = {}
    for index in sorted(Path(CACHES if root is None else root).glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = _KINDS.get((index / "type").read_text().strip())
            size = _bytes((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind is not None and size is not None:
            found[f"L{level}{kind}"] = size
    return found


def _bytes(size: str) -> int | None:
    """``"48K"`` -> 49152, ``"32M"`` -> 33554432, a plain number as bytes; None otherwise."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
    digits = size[:-1] if scale != 1 else size
    return int(digits) * scale if digits.isdigit() else None
