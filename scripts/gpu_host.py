"""The ``host`` section of ``scripts/gpu_check.py``: whether the GPU waits on posenc's host
work (issue 53, "the cost of a call").

The calls are those of ``posenc bench --cases host`` (:mod:`posenc.bench.host`, its sizes
read from its ``run``'s defaults): ``enc(q, k)`` of a RoPE module against transformers'
``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``; :func:`posenc.attention` with no
encoding and with each bias encoding against a bare causal SDPA call; a
:class:`~posenc.models.TransformerLM` forward of one token and a cached decode step against
Hugging Face's ``LlamaForCausalLM`` of the same widths (the peers are
:mod:`posenc.bench.peers`', built on the device). Each is timed eager and, while the
section's compile budget lasts, under ``torch.compile`` (the decode step over a
``StaticKVCache``, whose shapes do not change). Per call:

- ``host µs``: the Python call until it returns, the stream idle before it (no sync in the
  timing);
- ``GPU µs``: CUDA events recorded before and after the call: the stream's span from the
  call's start to its last kernel's end;
- ``kernel µs``: the GPU's busy time in the call (the kernels' own time, from
  ``torch.profiler``); ``GPU busy %`` = kernel µs / GPU µs: far below 100, the GPU waits
  on the host;
- ``x peer``: host µs over the peer's in the same mode.

Medians of ``calls`` calls after a warm-up; on the dry run (the CPU) only ``host µs`` and
``call µs`` (the call and a sync) are measured.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from gpu_timing import Context

import posenc
from posenc.bench import host as host_case
from posenc.bench import peers
from posenc.bench.bias_attention import bias_encodings
from posenc.models import TransformerLM

__all__ = ["HOST_DRY", "HOST_GPU", "SECTIONS", "HostSizes", "host"]

#: the host bench case's sizes: its ``run``'s defaults
BENCH = {n: p.default for n, p in inspect.signature(host_case.run).parameters.items()}


@dataclass(frozen=True)
class HostSizes:
    """The section's sizes and bounds: the bench case's calls, ``calls`` timed calls each,
    compiled rows started within ``compile_s`` seconds of the section's start, the whole
    section within ``budget_s``."""

    heads: int
    head_dim: int
    length: int
    model: dict[str, int]  # TransformerLM and HF Llama widths
    prefix: int  # the decode step's cached tokens
    calls: int
    compile_s: float
    budget_s: float
    encodings: tuple[str, ...] | None = None  # bias encodings (None: every one the case has)


HOST_GPU = HostSizes(
    heads=BENCH["heads"],
    head_dim=BENCH["head_dim"],
    length=BENCH["length"],
    model={k: BENCH[k] for k in ("vocab_size", "dim", "n_layers", "n_heads", "mlp_ratio")},
    prefix=BENCH["prefix"],
    calls=30,
    compile_s=35.0,
    budget_s=60.0,
)
HOST_DRY = HostSizes(
    heads=2,
    head_dim=16,
    length=4,
    model={"vocab_size": 37, "dim": 32, "n_layers": 2, "n_heads": 2, "mlp_ratio": 2},
    prefix=4,
    calls=3,
    compile_s=30.0,
    budget_s=60.0,
    encodings=("alibi", "t5"),
)


@dataclass
class Call:
    """One timed call: its row's fields and a zero-argument callable (built lazily: a
    compiled one compiles at its first call)."""

    row: dict[str, Any]
    make: Callable[[], Callable[[], Any]]
    peer_of: str | None = None  # the ``call`` whose peer this is (None: posenc's own)


def _timings(ctx: Context, fn: Callable[[], Any], calls: int) -> dict[str, Any]:
    """``host µs``, ``call µs`` and, on CUDA, ``GPU µs``, ``kernel µs`` and ``GPU busy %``
    of ``fn``: medians over ``calls`` calls, each after the stream went idle."""
    host, synced, span = [], [], []
    for _ in range(calls):
        ctx.sync()
        if ctx.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if ctx.cuda:
            end.record()
        ctx.sync()
        t2 = time.perf_counter()
        host.append(t1 - t0)
        synced.append(t2 - t0)
        if ctx.cuda:
            span.append(start.elapsed_time(end) * 1e3)
    out: dict[str, Any] = {
        "host µs": statistics.median(host) * 1e6,
        "call µs": statistics.median(synced) * 1e6,
    }
    if ctx.cuda:
        out["GPU µs"] = statistics.median(span)
        out["kernel µs"] = _kernel_us(ctx, fn, max(calls // 3, 3))
        if out["kernel µs"] is not None and out["GPU µs"] > 0:
            out["GPU busy %"] = 100 * out["kernel µs"] / out["GPU µs"]
    return out


def _kernel_us(ctx: Context, fn: Callable[[], Any], calls: int) -> float | None:
    """The GPU's busy time per call of ``fn``: the sum of the self device time of every
    operation ``torch.profiler`` saw, over ``calls`` calls (None if the profiler fails)."""
    from torch.profiler import ProfilerActivity, profile

    try:
        ctx.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            ctx.sync()
        total = 0.0
        for event in prof.key_averages():
            total += getattr(event, "self_device_time_total", None) or getattr(
                event, "self_cuda_time_total", 0.0
            )
        return total / calls
    except Exception:  # a profiler that will not run here: the other columns stand
        return None


def _no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        with torch.no_grad():
            return fn()

    return call


def _compiled(ctx: Context, fn: Callable[[], Any]) -> Callable[[], Any]:
    return torch.compile(fn, backend=ctx.compile_backend)


def _rope_calls(ctx: Context, s: HostSizes) -> list[Call]:
    """``enc(q, k)`` for one token, and transformers' rotation of it."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, s.heads, 1, s.head_dim, generator=gen).to(ctx.device) for _ in "qk")
    enc = posenc.create("rope", head_dim=s.head_dim).to(ctx.device)
    with torch.device(ctx.device):  # the peer's tables and ids made on the device
        rotate = peers.transformers_rotary_call(seq=1, head_dim=s.head_dim)
    base = {"call": "enc(q, k)", "encoding": "rope", "shape": [1, s.heads, 1, s.head_dim]}
    return [
        Call({**base, "impl": "posenc"}, lambda: lambda: enc(q, k)),
        Call(
            {**base, "impl": "transformers rotary + apply"},
            lambda: lambda: rotate(q, k),
            peer_of="enc(q, k)",
        ),
    ]


def _attention_calls(ctx: Context, s: HostSizes) -> list[Call]:
    """``posenc.attention`` plain and with each bias encoding, and one bare causal SDPA
    call (the peer of every attention row)."""
    gen = torch.Generator().manual_seed(0)
    shape = (1, s.heads, s.length, s.head_dim)
    q, k, v = (torch.randn(*shape, generator=gen).to(ctx.device) for _ in "qkv")
    names = list(s.encodings) if s.encodings is not None else bias_encodings()
    sdpa = {"call": "attention", "encoding": "none", "shape": list(shape)}
    calls = [
        Call(
            {**sdpa, "impl": "SDPA, causal"},
            lambda: lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            peer_of="attention",
        ),
        Call({**sdpa, "impl": "posenc"}, lambda: lambda: posenc.attention(q, k, v)),
    ]
    for name in names:
        enc = posenc.build(name, n_heads=s.heads, head_dim=s.head_dim).to(ctx.device).eval()
        row = {"call": "attention", "encoding": name, "shape": list(shape), "impl": "posenc"}
        calls.append(Call(row, lambda enc=enc: lambda: posenc.attention(q, k, v, encoding=enc)))
    return calls


def _model_calls(ctx: Context, s: HostSizes) -> list[Call]:
    """A forward of one token and a decode step over a cache of ``prefix`` tokens, of a
    TransformerLM (RoPE, ALiBi) and of HF Llama of the same widths."""
    m = s.model
    widths = f"dim {m['dim']}, n_layers {m['n_layers']}"
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, m["vocab_size"], (1, s.prefix), generator=gen).to(ctx.device)
    token = torch.zeros(1, 1, dtype=torch.long, device=ctx.device)
    room = s.prefix + 4 * s.calls + 16  # every timed or warm-up call adds a token

    def step(model: TransformerLM, static: bool) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            cache = model.new_cache(1, room, static=static)
            with torch.no_grad():
                model(prompt, cache=cache)
            return lambda: model(token, cache=cache)

        return make

    calls = []
    for kind in ("rope", "alibi"):
        torch.manual_seed(0)
        model = TransformerLM(**m, encoding=kind).to(ctx.device).eval()
        base = {"encoding": kind, "shape": [1, 1], "model": widths, "impl": "posenc"}
        calls.append(
            Call({**base, "call": "forward, 1 token"}, lambda model=model: lambda: model(token))
        )
        calls.append(Call({**base, "call": "decode step"}, step(model, static=False)))
        calls.append(Call({**base, "call": "decode step, static cache"}, step(model, static=True)))
    with torch.device(ctx.device):
        llama, new_cache, kwarg = peers.hf_llama(**m)
    hf = {"encoding": "rope", "shape": [1, 1], "model": widths, "impl": "transformers Llama"}

    def hf_step() -> Callable[[], Any]:
        cache = {kwarg: new_cache(), "use_cache": True}
        with torch.no_grad():
            llama(input_ids=prompt, **cache)
        return lambda: llama(input_ids=token, **cache).logits

    calls.append(
        Call(
            {**hf, "call": "forward, 1 token"},
            lambda: lambda: llama(input_ids=token, use_cache=False).logits,
            peer_of="forward, 1 token",
        )
    )
    calls.append(Call({**hf, "call": "decode step"}, hf_step, peer_of="decode step"))
    return calls


#: the calls compiled, in order, while the compile budget lasts: (call, encoding, impl)
COMPILED = (
    ("enc(q, k)", "rope", "posenc"),
    ("enc(q, k)", "rope", "transformers rotary + apply"),
    ("attention", "none", "SDPA, causal"),
    ("attention", "none", "posenc"),
    ("attention", "alibi", "posenc"),
    ("forward, 1 token", "rope", "posenc"),
    ("decode step, static cache", "rope", "posenc"),
    ("forward, 1 token", "rope", "transformers Llama"),
)


def host(ctx: Context) -> dict[str, Any]:
    """Host µs and GPU µs of the host bench case's calls, eager then compiled (see the
    module's docstring)."""
    s = HOST_GPU if ctx.cuda else HOST_DRY
    start = time.monotonic()
    until, compile_until = start + s.budget_s, start + s.compile_s
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    calls = _rope_calls(ctx, s) + _attention_calls(ctx, s) + _model_calls(ctx, s)
    compiled = {key: n for n, key in enumerate(COMPILED)}
    plan = [(c, "eager") for c in calls]
    plan += sorted(
        ((c, "compiled") for c in calls if _key(c) in compiled), key=lambda p: compiled[_key(p[0])]
    )
    peer_host: dict[tuple[str, str], float] = {}
    for call, mode in plan:
        if ctx.past(compile_until if mode == "compiled" else until):
            notes.append(f"past the section's budget: stopped before {_label(call, mode)}")
            break
        row: dict[str, Any] = {**call.row, "mode": mode}
        try:
            fn = call.make()
            fn = _no_grad(_compiled(ctx, fn) if mode == "compiled" else fn)
            row["first_s"] = ctx.first_call(fn)
            row.update(_timings(ctx, fn, s.calls))
            if call.peer_of is not None:
                peer_host[(call.peer_of, mode)] = row["host µs"]
        except Exception as e:  # one call's failure is a row, not the end of the section
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
    for row in rows:
        peer = peer_host.get((row["call"].removesuffix(", static cache"), row["mode"]))
        if row["impl"] == "posenc" and peer and "host µs" in row:
            row["x peer"] = row["host µs"] / peer
    notes.append(
        f"sizes of posenc bench --cases host; medians of {s.calls} calls; compiled with "
        f"torch.compile(backend={ctx.compile_backend!r}) while {s.compile_s:.0f} s lasted"
    )
    if ctx.cuda:
        notes.append("GPU busy % far below 100: the GPU waits on the host")
    return {"rows": rows, "notes": notes}


def _key(call: Call) -> tuple[str, str, str]:
    return call.row["call"], call.row["encoding"], call.row["impl"]


def _label(call: Call, mode: str) -> str:
    return f"{call.row['call']} ({call.row['encoding']}, {call.row['impl']}, {mode})"


SECTIONS: dict[str, Callable[[Context], dict[str, Any]]] = {"host": host}
