"""Case 3: causal attention with each bias encoding: time and peak memory against the floor.

For every bias encoding of :func:`posenc.available` and every length, one row with:

- ``floor``: plain causal SDPA, no positional term;
- ``posenc``: :func:`posenc.attention` with the encoding, backend ``"auto"``;
- ``sdpa+bias``: :func:`posenc.attention` with backend ``"sdpa"``, the bias materialised as
  ``[heads, L, L]`` (what most implementations do);
- the peers that have this encoding (:data:`posenc.bench.peers.BIAS_PEERS`).

Batch 1, causal, float32 by default; forward (under ``no_grad``) or forward+backward (the
output's gradient fixed, the input gradients cleared after each call). The peak memory of
each implementation (:mod:`posenc.bench.memory`) is measured in one separate process for
all rows (``python -m posenc.bench.bias_attention --memory`` reads their specs on stdin).
A materialising implementation whose ``[heads, L, L]`` tensors would need more than half of
the available memory is skipped, with the reason, rather than risk the run. The rows are
timed together, a round of every row at a time (:func:`~posenc.bench.timing.interleaved_rows`),
so each row's rounds are spread over the whole case.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .. import registry
from ..attn import attention
from ..base import ReadsInput, ScoreBias, ScoreWeights
from ..builder import build
from . import memory
from . import peers as peers_mod
from .timing import forward_call, interleaved_rows, row

__all__ = ["bias_encodings", "impls", "run"]

FLOOR = "floor"
PASSES = ("fwd", "fwd+bwd")


def bias_encodings() -> list[str]:
    """Every registered encoding of kind ``bias`` whose bias comes from the positions alone:
    not FoX's or PaTH's (they read the layer's input), CoPE's (each row's scores: no
    ``sdpa`` form) nor stick-breaking's (its weights are no softmax), which the training
    case times in a model."""
    names = [n for n in registry.available() if registry.info(n).kind == "bias"]
    others = (ReadsInput, ScoreBias, ScoreWeights)
    return [n for n in names if not issubclass(registry.get(n), others)]


def _too_big(heads: int, L: int, dtype: torch.dtype, pass_: str) -> str | None:
    """Why a materialised ``[heads, L, L]`` path should not run here, or None."""
    tensors = 3 if pass_ == "fwd" else 6  # bias, scores, probabilities (and their grads)
    need = tensors * heads * L * L * torch.finfo(dtype).bits // 8
    free = memory.available_bytes()
    if free is not None and need > free // 2:
        return f"would need ~{need / 2**30:.1f} GiB of [heads, L, L] tensors"
    return None


def impls(
    encoding: str,
    L: int,
    heads: int = 8,
    head_dim: int = 64,
    dtype: str = "float32",
    pass_: str = "fwd",
    peers: bool = True,
    materialised: bool = True,
) -> tuple[dict[str, Callable[[], Any]], dict[str, str]]:
    """The callables of one row (name -> no-argument call) and the skipped ones (name ->
    reason); ``peers`` and ``materialised`` (the ``sdpa+bias`` column) off for a long row
    that only compares posenc with the floor."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(1, heads, L, head_dim, generator=gen).to(dt) for _ in range(3))
    grad = torch.randn(1, heads, L, head_dim, generator=gen).to(dt)
    enc = build(encoding, n_heads=heads, head_dim=head_dim).to(dt)

    grads = None if pass_ == "fwd" else (grad,)

    def timed(fn: Callable[..., torch.Tensor]) -> Callable[[], Any]:
        return forward_call(fn, (q, k, v), grads)

    def sdpa_floor(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def posenc_auto(q, k, v):
        return attention(q, k, v, encoding=enc)

    def posenc_sdpa(q, k, v):
        return attention(q, k, v, encoding=enc, backend="sdpa")

    calls = {FLOOR: timed(sdpa_floor), "posenc": timed(posenc_auto)}
    skipped: dict[str, str] = {}
    too_big = _too_big(heads, L, dt, pass_)
    if not materialised:
        skipped["sdpa+bias"] = "not run: a long row compares posenc with the floor"
    elif too_big:
        skipped["sdpa+bias"] = f"unsupported: {too_big}"
    else:
        calls["sdpa+bias"] = timed(posenc_sdpa)
    if peers:
        if too_big:
            skipped |= {name: f"unsupported: {too_big}" for name in peers_mod.BIAS_PEERS}
        else:
            small = [t[..., :8, :] for t in (q, k, v)]
            usable, skipped_peers = peers_mod.resolve(
                peers_mod.BIAS_PEERS,
                trial=lambda fn: fn(*small),
                encoding=encoding,
                heads=heads,
            )
            skipped |= skipped_peers
            calls |= {name: timed(fn) for name, fn in usable.items()}
    return calls, skipped


def run(
    lengths: Sequence[int],
    encodings: Sequence[str] | None = None,
    passes: Sequence[str] = PASSES,
    heads: int = 8,
    head_dim: int = 64,
    dtype: str = "float32",
    repeat: int = 5,
    warmup: int = 1,
    peers: bool = True,
    measure_memory: bool = True,
    long_lengths: Sequence[int] = (),
    long_encodings: Sequence[str] = ("alibi", "t5", "kerple"),
) -> list[dict[str, Any]]:
    """One record per (pass, length, encoding), then a forward row per (long length, long
    encoding) against the floor alone (no peers, no materialised bias: long contexts keep
    the ratios of short ones, or they do not); each result also has ``peak_mib`` (extra
    resident MiB at the peak, or None) and ``x_floor_memory``. Every row's inputs are built
    first, then timed round by round across the rows."""
    names = list(encodings) if encodings is not None else bias_encodings()
    sizes = {"heads": heads, "head_dim": head_dim, "dtype": dtype}
    specs: list[dict[str, Any]] = [
        {"encoding": name, "L": L, **sizes, "pass_": pass_, "peers": peers}
        for pass_ in passes
        for L in lengths
        for name in names
    ]
    specs += [
        {"encoding": name, "L": L, **sizes, "pass_": "fwd", "peers": False, "materialised": False}
        for L in long_lengths
        for name in long_encodings
    ]
    peaks: list[dict[str, Any]] = [{} for _ in specs]
    if measure_memory and memory.available():
        peaks = memory.in_subprocess(__name__, specs)
    built = [impls(**spec) for spec in specs]
    timed = interleaved_rows([calls for calls, _ in built], repeat=repeat, warmup=warmup)
    records = []
    for spec, peak, (_, skipped), stats in zip(specs, peaks, built, timed, strict=True):
        config = {k: spec[k] for k in ("encoding", "L", "heads", "head_dim", "dtype")}
        record = row({**config, "pass": spec["pass_"]}, stats, FLOOR, skipped)
        floor_mib = peak.get(FLOOR)
        for name, result in record["results"].items():
            mib = peak.get(name)
            result["peak_mib"] = mib
            result["x_floor_memory"] = memory.ratio(mib, floor_mib)
        if "error" in peak:
            record["memory_error"] = peak["error"]
        records.append(record)
    return records


def _memory_main() -> int:
    """The ``--memory`` child: for each spec on stdin, one JSON line name -> extra MiB."""
    for spec in json.loads(sys.stdin.read()):
        calls, _ = impls(**spec)
        print(json.dumps(memory.peaks_mib(calls)), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--memory"]:
        sys.exit(
            "this module is the bias case of posenc bench; run it with: posenc bench --cases "
            "bias (python -m posenc.bench.bias_attention --memory < specs.json is its "
            "memory-measuring child)"
        )
    sys.exit(_memory_main())
