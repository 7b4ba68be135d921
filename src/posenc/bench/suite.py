"""``posenc bench``: every benchmark case, one size preset, one JSON and one Markdown file.

Cases: ``rope`` (:mod:`~posenc.bench.rope`), ``decode``
(:mod:`~posenc.bench.decode`), ``bias`` (:mod:`~posenc.bench.bias_attention`),
``training`` (:mod:`~posenc.bench.training`), ``patterns`` (sliding window and chunk
against full causal, :mod:`~posenc.bench.patterns`), ``rolling`` (a decode step with a
rolling KV cache, :mod:`~posenc.bench.rolling`), ``compiled`` (a decode step and a
training step, eager against ``torch.compile``, :mod:`~posenc.bench.compiled`) and
``rerotate`` (a cache's RoPE keys shifted in place against recomputed,
:mod:`~posenc.bench.rerotate`) and ``host`` (the host time of one call on tiny tensors
against the peer doing the same work, :mod:`~posenc.bench.host`). Sizes:

- ``tiny``: seconds; what the tests run (the numbers mean nothing);
- ``small``: about ten minutes on two cores; a quick look at every case (patterns L
  1k..8k);
- ``full``: the whole ranges (RoPE seq 128..8192, bias L 1k..16k, training 256..2048,
  patterns L 1k..32k, rolling cache L 2k..128k).

The files are ``<date>-<cpu>[-<size>][-<ATEN_CPU_CAPABILITY>].json`` and ``.md`` in the
output folder (size omitted for ``full``), so a run on the same day, machine, size and
capability replaces the previous one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import calibration
from . import (
    bias_attention,
    compiled,
    decode,
    host,
    markdown,
    patterns,
    peers,
    rerotate,
    rolling,
    rope,
    training,
)
from .machine import cpu_slug, machine

__all__ = ["CASES", "FORMAT", "PRESETS", "SIZES", "file_stem", "run", "write"]

FORMAT = "posenc-bench/1"
CASES = (
    "rope",
    "decode",
    "bias",
    "training",
    "patterns",
    "rolling",
    "compiled",
    "rerotate",
    "host",
)
SIZES = ("tiny", "small", "full")
DEFAULT_OUT = "benchmarks/results"

RUNNERS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "rope": rope.run,
    "decode": decode.run,
    "bias": bias_attention.run,
    "training": training.run,
    "patterns": patterns.run,
    "rolling": rolling.run,
    "compiled": compiled.run,
    "rerotate": rerotate.run,
    "host": host.run,
}

#: the keyword arguments of each case's ``run`` at each size
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {
        "rope": {"seqs": [16], "head_dims": [8], "batch": 1, "heads": 2, "repeat": 2, "warmup": 1},
        "decode": {"dim": 32, "n_layers": 1, "n_heads": 2, "prefix": 4, "repeat": 2, "warmup": 1},
        # two bias encodings (the two with peers) keep the tests' run short
        "bias": {
            "lengths": [16],
            "encodings": ["alibi", "t5"],
            "long_lengths": [32],
            "long_encodings": ["alibi"],
            "heads": 2,
            "head_dim": 8,
            "repeat": 2,
            "warmup": 1,
        },
        "training": {
            "lengths": [8],
            "dim": 16,
            "n_layers": 1,
            "n_heads": 2,
            "batch": 1,
            "repeat": 1,
            "warmup": 1,
        },
        # flex attention needs FLEX_MIN_SCORES scores: these run SDPA with dense masks
        "patterns": {
            "lengths": [16, 32],
            "window": 4,
            "chunk": 8,
            "heads": 2,
            "head_dim": 8,
            "repeat": 2,
            "warmup": 1,
        },
        "rolling": {
            "lengths": [32],
            "window": 4,
            "heads": 2,
            "kv_heads": 1,
            "head_dim": 8,
            "repeat": 2,
            "warmup": 1,
        },
        # compiles take seconds each even at these sizes: one kind
        "compiled": {
            "dim": 16,
            "n_layers": 1,
            "n_heads": 2,
            "prefix": 4,
            "lengths": [8],
            "kinds": ["rope"],
            "batch": 1,
            "repeat": 2,
            "warmup": 1,
        },
        "rerotate": {
            "lengths": [16],
            "dim": 16,
            "kv_heads": 2,
            "head_dim": 8,
            "repeat": 2,
            "warmup": 1,
        },
        "host": {
            "encodings": ["alibi"],
            "kinds": ["rope"],
            "head_dim": 8,
            "length": 4,
            "dim": 16,
            "n_layers": 1,
            "prefix": 2,
            "calls": 2,
            "repeat": 2,
            "warmup": 1,
        },
    },
    "small": {
        # posenc compiles its RoPE kernel once per shape class: a warm-up of ~10 s each
        "rope": {"seqs": [512, 2048], "head_dims": [128], "repeat": 7, "warmup": 2},
        "decode": {"repeat": 15, "warmup": 3},
        # one length: a forward+backward row at L=2048 alone takes over a minute on 2 cores;
        # and ALiBi, T5 and KERPLE forward at L 8192 against the floor alone
        # 15 rounds, spread over the case: the targets read the fastest, which more rounds
        # make less disturbed
        "bias": {"lengths": [1024], "long_lengths": [8192], "repeat": 15, "warmup": 1},
        "training": {"lengths": [256, 512], "repeat": 11, "warmup": 1},
        # window 256, chunk 512; a length compiles its flex kernels once (a few s each)
        "patterns": {"lengths": [1024, 2048, 4096, 8192], "repeat": 3, "warmup": 1},
        "rolling": {"lengths": [2048, 8192, 32768], "repeat": 15, "warmup": 3},
        "compiled": {"lengths": [256], "repeat": 15, "warmup": 3},
        "rerotate": {"lengths": [4096, 32768], "repeat": 15, "warmup": 2},
        # one call per round: the fastest of 200 rounds is a call the host did undisturbed
        "host": {"repeat": 200, "warmup": 20},
    },
    "full": {
        "rope": {"seqs": [128, 512, 2048, 8192], "head_dims": [64, 128], "repeat": 15, "warmup": 3},
        "decode": {"repeat": 30, "warmup": 5},
        "bias": {"lengths": [1024, 2048, 4096, 8192, 16384], "repeat": 5, "warmup": 1},
        "training": {"lengths": [256, 512, 1024, 2048], "repeat": 5, "warmup": 2},
        "patterns": {
            "lengths": [1024, 2048, 4096, 8192, 16384, 32768],
            "repeat": 5,
            "warmup": 1,
        },
        "rolling": {"lengths": [2048, 8192, 32768, 131072], "repeat": 30, "warmup": 5},
        "compiled": {"lengths": [256, 1024], "repeat": 30, "warmup": 5},
        "rerotate": {"lengths": [4096, 32768, 131072], "repeat": 30, "warmup": 3},
        "host": {"repeat": 1000, "warmup": 50},
    },
}


def _check(size: str, cases: Sequence[str], repeat: int | None) -> None:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise ValueError(f"cases must be some of {CASES}, got {list(cases)}")
    if repeat is not None and (not isinstance(repeat, int) or repeat < 1):
        raise ValueError(f"repeat must be an int >= 1, got {repeat!r}")


def run(
    size: str = "small",
    cases: Sequence[str] = CASES,
    repeat: int | None = None,
    command: str = "posenc bench",
    progress: Callable[[str], None] | None = None,
    extra: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Run ``cases`` at ``size`` (``repeat`` overrides the preset's timed rounds) and
    return the result document: ``format``, ``size``, ``command``, ``machine``, ``peers``
    (versions), ``presets`` (what ran), ``seconds`` (per case) and ``cases`` (case ->
    records).

    ``extra`` gives a case more arguments from above the bench layer (case -> argument ->
    labelled callables: the ``host`` case's ``hf_patches``, :func:`posenc.hf.apply`);
    ``presets`` records their labels."""
    _check(size, cases, repeat)
    result: dict[str, Any] = {
        "format": FORMAT,
        "size": size,
        "command": command,
        "machine": machine(),
        "peers": peers.versions(),
        "presets": {},
        "seconds": {},
        "cases": {},
    }
    for case in CASES:  # the suite's order, whatever order they were asked in
        if case not in cases:
            continue
        kwargs = dict(PRESETS[size][case])
        if repeat is not None:
            kwargs["repeat"] = repeat
        given = dict((extra or {}).get(case, {}))
        if progress:
            progress(f"{case} ({size}) ...")
        start = time.perf_counter()
        result["cases"][case] = RUNNERS[case](**kwargs, **given)
        result["seconds"][case] = time.perf_counter() - start
        result["presets"][case] = kwargs | {name: list(value) for name, value in given.items()}
    result["calibration"] = calibration.chosen()  # the block sizes measured on this machine
    return result


def file_stem(result: Mapping[str, Any]) -> str:
    """``<date>-<cpu slug>[-<size>][-<capability forced by ATEN_CPU_CAPABILITY>]``.

    >>> file_stem({"size": "small", "machine": {"date": "2026-12-01",
    ...     "cpu_model": "AMD EPYC", "aten_cpu_capability_env": "avx2"}})
    '2026-12-01-amd-epyc-small-avx2'
    """
    m = result["machine"]
    parts = [m["date"], cpu_slug(m["cpu_model"])]
    if result["size"] != "full":
        parts.append(result["size"])
    if m.get("aten_cpu_capability_env"):
        parts.append(cpu_slug(m["aten_cpu_capability_env"]))
    return "-".join(parts)


def write(result: Mapping[str, Any], out: str | os.PathLike[str] = DEFAULT_OUT) -> Path:
    """Write ``<stem>.json`` and ``<stem>.md`` into ``out`` (created if missing); return the
    JSON's path."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stem = file_stem(result)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (folder / f"{stem}.md").write_text(markdown.report(result), encoding="utf-8")
    return path
