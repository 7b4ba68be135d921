"""Case 5: sliding-window and chunked attention against full causal attention, across L.

For every encoding (``nope``, ``alibi``, ``rope`` by default) and every length ``L`` of an
increasing series (doubling, so that growth reads off), one row of
:func:`posenc.attention`, causal, batch 1, forward under ``no_grad``:

- ``full``: every causal key (the floor);
- ``window W``: a sliding window of ``W`` keys;
- ``window W, positions``: the same with explicit positions ``arange(L)`` (as a model with
  a KV cache or packed documents passes them), whose flex block mask is built per call;
- ``chunk C``: Llama 4's chunks of ``C`` keys;
- ``dca S/w`` (``rope`` only): Dual Chunk Attention (Qwen2.5-1M's plan, ``S = 2C``,
  ``w = C/2``): every key seen, queries turned three ways, by blocks of rows.

Where :func:`~posenc.attn.planner.plan` takes flex attention, the window's and the chunk's
block masks skip the tiles they hide, so their time and memory should grow linearly in ``L``
at a fixed ``W`` (``C``), and full causal attention's quadratically. Each result has the
runner the chooser picked, ``us_per_token`` (the median over ``L``: flat when linear) and
``growth``, its median over the same implementation's at the previous length of the series
(2x per doubling when linear, 4x when quadratic; None at the first length). Peak memory
(:mod:`posenc.bench.memory`) is measured in one separate process for all rows (``python -m
posenc.bench.patterns --memory``), after an untimed call that builds the cached block mask
and compiles the kernel.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..attn import attention
from ..attn.masks import AttnPattern
from ..attn.planner import AttnShape, ScoreTraits, plan
from ..base import BiasEncoding, Encoding
from ..builder import build
from ..positions import AttnPositions
from . import memory
from .timing import forward_call, interleaved, row

__all__ = ["ENCODINGS", "FLOOR", "impls", "run"]

ENCODINGS = ("nope", "alibi", "rope")
FLOOR = "full"
#: resident bytes per score that torch's ``create_block_mask`` takes to build the block mask
#: of explicit positions (it evaluates the mask at every ``[L, L]`` score: ~2.5 GiB at
#: L = 16k, torch 2.13)
MASK_BUILD_BYTES_PER_SCORE = 10


def _names(window: int, chunk: int) -> tuple[str, str, str]:
    return f"window {window}", f"window {window}, positions", f"chunk {chunk}"


def _runner(enc: Encoding, q: torch.Tensor, kwargs: dict[str, Any]) -> str:
    """The runner :func:`posenc.attention` takes for ``attention(q, q, q, enc, **kwargs)``,
    asked of its chooser."""
    L = q.shape[2]
    positions = AttnPositions.build(
        L, L, 1, q.device, kwargs.get("q_positions"), kwargs.get("k_positions")
    )
    shape = AttnShape.of(q, q)
    traits = ScoreTraits(AttnPattern(kwargs.get("window"), kwargs.get("chunk")), None, False, True)
    bias = enc if isinstance(enc, BiasEncoding) else None
    chosen = plan(
        bias, shape, positions, masked=False, needs_grad=False, device=q.device, traits=traits
    )
    return chosen.runner


def impls(
    encoding: str,
    L: int,
    window: int = 256,
    chunk: int = 512,
    heads: int = 8,
    head_dim: int = 64,
    dtype: str = "float32",
) -> tuple[dict[str, Callable[[], Any]], dict[str, str], dict[str, str]]:
    """The callables of one row (name -> no-argument call), the skipped ones (name ->
    reason) and the runner of each callable (name -> the chooser's runner)."""
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(1, heads, L, head_dim, generator=gen).to(dt) for _ in range(3))
    enc = build(encoding, n_heads=heads, head_dim=head_dim).to(dt)
    where = torch.arange(L)
    name_w, name_wp, name_c = _names(window, chunk)
    kwargs: dict[str, dict[str, Any]] = {
        FLOOR: {},
        name_w: {"window": window},
        name_wp: {"window": window, "q_positions": where, "k_positions": where},
        name_c: {"chunk": chunk},
    }
    runners = {name: _runner(enc, q, kw) for name, kw in kwargs.items()}
    skipped: dict[str, str] = {}
    need = MASK_BUILD_BYTES_PER_SCORE * L * L
    free = memory.available_bytes()
    if runners[name_wp] == "flex" and free is not None and need > free // 2:
        skipped[name_wp] = (
            f"unsupported: building its block mask would take ~{need / 2**30:.1f} GiB"
        )
        del kwargs[name_wp], runners[name_wp]

    def call(kw: dict[str, Any], e: Encoding = enc) -> Callable[[], Any]:
        return forward_call(lambda q, k, v: attention(q, k, v, e, **kw), (q, k, v))

    calls = {name: call(kw) for name, kw in kwargs.items()}
    if encoding == "rope":  # Dual Chunk Attention: RoPE in chunks, its own softmax
        name, dca = dca_encoding(chunk, head_dim)
        calls[name], runners[name] = call({}, dca.to(dt)), "dual_chunk"
    return calls, skipped, runners


def dca_encoding(chunk: int, head_dim: int) -> tuple[str, Encoding]:
    """The ``dca`` row's name and encoding: ``chunk_size = 2·chunk``, ``local_size =
    chunk / 2`` (chunks of ``1.5·chunk`` positions: at L = 8k, 11 chunks of 768)."""
    size, local = 2 * chunk, chunk // 2
    return f"dca {size}/{local}", build("dca", head_dim=head_dim, chunk_size=size, local_size=local)


def _add_growth(records: list[dict[str, Any]]) -> None:
    """Set each result's ``growth``: its median over the same implementation's in the
    previous record of the same encoding (None in the first)."""
    previous: dict[str, dict[str, Any]] = {}
    for r in records:
        before = previous.get(r["config"]["encoding"], {})
        for name, result in r["results"].items():
            prev = before.get(name)
            result["growth"] = result["median_ms"] / prev["median_ms"] if prev else None
        previous[r["config"]["encoding"]] = r["results"]


def run(
    lengths: Sequence[int],
    encodings: Sequence[str] = ENCODINGS,
    window: int = 256,
    chunk: int = 512,
    heads: int = 8,
    head_dim: int = 64,
    dtype: str = "float32",
    repeat: int = 3,
    warmup: int = 1,
    measure_memory: bool = True,
) -> list[dict[str, Any]]:
    """One record per (encoding, length), the lengths in increasing order; each result has
    its ``runner``, ``peak_mib`` (extra resident MiB at the peak, or None),
    ``x_floor_memory``, ``us_per_token`` and ``growth``."""
    if not lengths or list(lengths) != sorted(set(lengths)):
        raise ValueError(f"lengths must be increasing and distinct, got {list(lengths)}")
    specs: list[dict[str, Any]] = [
        {
            "encoding": name,
            "L": L,
            "window": window,
            "chunk": chunk,
            "heads": heads,
            "head_dim": head_dim,
            "dtype": dtype,
        }
        for name in encodings
        for L in lengths
    ]
    peaks: list[dict[str, Any]] = [{} for _ in specs]
    if measure_memory and memory.available():
        peaks = memory.in_subprocess(__name__, specs)
    records = []
    for spec, peak in zip(specs, peaks, strict=True):
        calls, skipped, runners = impls(**spec)
        stats = interleaved(calls, repeat=repeat, warmup=warmup)
        record = row(spec, stats, FLOOR, skipped)
        for name, result in record["results"].items():
            result["runner"] = runners[name]
            result["peak_mib"] = peak.get(name)
            result["x_floor_memory"] = memory.ratio(peak.get(name), peak.get(FLOOR))
            result["us_per_token"] = result["median_ms"] * 1e3 / spec["L"]
        if "error" in peak:
            record["memory_error"] = peak["error"]
        records.append(record)
    _add_growth(records)
    return records


def _memory_main() -> int:
    """The ``--memory`` child: for each spec on stdin, one JSON line name -> extra MiB."""
    for spec in json.loads(sys.stdin.read()):
        calls, _, _ = impls(**spec)
        print(json.dumps(memory.peaks_mib(calls)), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--memory"]:
        sys.exit(
            "this module is the patterns case of posenc bench; run it with: posenc bench "
            "--cases patterns (python -m posenc.bench.patterns --memory < specs.json is its "
            "memory-measuring child)"
        )
    sys.exit(_memory_main())
