"""The machine a measurement ran on, as the tools that record one read it: the CPU model and
its vector-instruction flags from ``/proc/cpuinfo``. Standard library only, so that both
the benchmarks (:mod:`posenc.bench.machine`) and the arena's results read it without
importing each other.
"""

from __future__ import annotations

import platform

__all__ = ["FLAGS", "cpu_info"]

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
