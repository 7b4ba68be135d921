"""The timed sections of ``scripts/gpu_check.py``: the copy floor, RoPE, bias encodings
through flex attention, host reads and syncs per forward, a decode step eager, compiled
and with CUDA graphs, against transformers' Llama (the host section, whether the GPU
waits on a call's host work, is ``scripts/gpu_host.py``).

Each section is a function of a :class:`Context` returning ``{"rows": [...], "notes":
[...]}``; a row is a flat dict (one line of the section's Markdown table). Timed rows
hold ``ms``: on CUDA the median of ``triton.testing.do_bench`` (CUDA events; the L2 cache
flushed between calls), or of CUDA events where Triton is missing; on the dry run the
median of a few ``time.perf_counter`` rounds. A section stops starting rows past its
deadline and says so in its notes. A first call (compiling, where there is something to
compile) is timed apart as ``first_s``.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import posenc
from posenc.base import InputBias, InputTransforms
from posenc.functional import compiled as posenc_compiled
from posenc.models import TransformerLM

__all__ = ["DRY", "GPU", "SECTIONS", "Context", "Sizes"]


@dataclass(frozen=True)
class Sizes:
    """The shapes of one run: the issue's on a GPU, tiny ones on the dry run."""

    rope: tuple[int, int, int, int]  # [batch, heads, seq, head_dim]
    bias: tuple[int, int, int, int]
    fox_dim: int  # the width of the layer input FoX's gates read
    decode: dict[str, int]  # TransformerLM sizes
    prompt: int
    steps: int  # eager decode steps timed
    compiled_steps: int
    sync_seq: int  # tokens per sequence in the host-read counts
    sync_names: tuple[str, ...] | None = None  # the encodings counted (None: every one)


GPU = Sizes(
    rope=(2, 32, 4096, 128),
    bias=(1, 8, 4096, 64),
    fox_dim=512,
    decode={"vocab_size": 256, "dim": 512, "n_layers": 8, "n_heads": 8},
    prompt=32,
    steps=64,
    compiled_steps=24,
    sync_seq=256,
)
DRY = Sizes(
    rope=(1, 2, 64, 16),
    bias=(1, 2, 64, 16),
    fox_dim=32,
    decode={"vocab_size": 37, "dim": 32, "n_layers": 2, "n_heads": 2},
    prompt=8,
    steps=4,
    compiled_steps=2,
    sync_seq=16,
    # one of each kind, and the bias encodings that take other paths (the layer's input,
    # the scores, an MLP)
    sync_names=("sinusoidal", "rope", "alibi", "fire", "fox", "cope", "nope"),
)


@dataclass
class Context:
    """What every section reads: the device, the sizes, the deadlines and the copy floor.

    ``compile_backend``: ``torch.compile``'s backend for the compiled rows (``inductor``;
    ``eager`` on the dry run: dynamo traces, nothing is code-generated, so the dry run
    stays within seconds). ``bias_backend``: ``flex`` (``math`` on the dry run: compiled
    flex costs about 20 s of CPU per encoding).
    """

    device: torch.device
    sizes: Sizes
    deadline: float  # time.monotonic(): no section starts a row past it
    compile_backend: str = "inductor"
    bias_backend: str = "flex"
    copy_gbs: dict[str, float] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def past(self, until: float | None = None) -> bool:
        """Whether the run's deadline (or ``until``, if earlier) has passed."""
        now = time.monotonic()
        return now > self.deadline or (until is not None and now > until)

    def first_call(self, fn: Callable[[], Any]) -> float:
        """Seconds of one call of ``fn`` (a first one: compiling, allocating)."""
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def ms(self, fn: Callable[[], Any]) -> tuple[float, str]:
        """``(median milliseconds of a call of fn, how it was timed)``."""
        if not self.cuda:
            fn()
            rounds = []
            for _ in range(5):
                start = time.perf_counter()
                fn()
                rounds.append(time.perf_counter() - start)
            return statistics.median(rounds) * 1e3, "perf_counter, median of 5"
        try:
            from triton.testing import do_bench
        except ImportError:
            return _events_ms(fn), "CUDA events, median of 20"
        try:
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median")), "do_bench"
        except TypeError:  # an older Triton without return_mode: its mean
            return float(do_bench(fn, warmup=25, rep=100)), "do_bench (mean)"


def _events_ms(fn: Callable[[], Any], rounds: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _gbs(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


# the copy floor -----------------------------------------------------------------------------


def copy_floor(ctx: Context) -> dict[str, Any]:
    """``torch.empty_like(x).copy_(x)`` of one RoPE input: bytes read + written per second,
    the floor the RoPE rows are a percentage of."""
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(ctx.sizes.rope, device=ctx.device, dtype=dtype)
        ms, timer = ctx.ms(lambda x=x: torch.empty_like(x).copy_(x))
        gbs = _gbs(2 * x.nbytes, ms)
        ctx.copy_gbs[_dtype_name(dtype)] = gbs
        rows.append(
            {
                "dtype": _dtype_name(dtype),
                "shape": list(x.shape),
                "MB moved": 2 * x.nbytes / 1e6,
                "ms": ms,
                "GB/s": gbs,
                "timer": timer,
            }
        )
    return {"rows": rows, "notes": []}


# RoPE ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def compiled_kernels(enabled: bool) -> Iterator[None]:
    """posenc's own compiled kernels (the RoPE rotation, FIRE's rows) on or off within."""
    old = posenc_compiled.ENABLED
    posenc_compiled.ENABLED = enabled and old
    try:
        yield
    finally:
        posenc_compiled.ENABLED = old


def _transformers_rope(seq: int, head_dim: int, q: torch.Tensor) -> Callable[..., Any]:
    """Llama's ``LlamaRotaryEmbedding`` (cos/sin once) and eager ``apply_rotary_pos_emb``."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(
        hidden_size=head_dim, num_attention_heads=1, max_position_embeddings=max(seq, 2)
    )
    rotary = LlamaRotaryEmbedding(config).to(q.device)
    cos, sin = rotary(q, torch.arange(seq, device=q.device)[None])
    return lambda q, k: apply_rotary_pos_emb(q, k, cos, sin)


def _liger_rope(seq: int, head_dim: int, q: torch.Tensor) -> Callable[..., Any]:
    """Liger-Kernel's Triton ``liger_rotary_pos_emb`` with Llama's cos/sin."""
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=head_dim, num_attention_heads=1, max_position_embeddings=max(seq, 2)
    )
    rotary = LlamaRotaryEmbedding(config).to(q.device)
    cos, sin = rotary(q, torch.arange(seq, device=q.device)[None])
    return lambda q, k: liger_rotary_pos_emb(q, k, cos, sin)


PEERS = {"transformers eager": _transformers_rope, "liger": _liger_rope}


def _rope_impls(ctx: Context, q: torch.Tensor) -> tuple[dict[str, Callable], dict[str, str]]:
    _, _, seq, head_dim = q.shape
    enc = posenc.create("rope", head_dim=head_dim).to(ctx.device)
    tables = enc.rotation(torch.arange(seq, device=ctx.device))

    def eager_kernels(q, k):
        with compiled_kernels(False):
            return enc(q, k)

    impls: dict[str, Callable] = {
        "posenc": lambda q, k: enc(q, k),
        "posenc, eager kernels": eager_kernels,
        "posenc rotate, tables once": lambda q, k: (
            enc.rotate(q, tables),
            enc.rotate(k, tables, key=True),
        ),
        "posenc under torch.compile": torch.compile(
            lambda q, k: enc(q, k), backend=ctx.compile_backend
        ),
    }
    skipped = {}
    try:  # posenc's Triton kernel (issue 41): where Triton imports
        from posenc.functional.rope_triton import rope_triton, triton_available

        if not triton_available():
            raise ImportError("triton")
        positions, inv_freq = torch.arange(seq, device=ctx.device), enc.inv_freq()
        impls["posenc triton kernel"] = lambda q, k: rope_triton(q, k, positions, inv_freq)
        fast = posenc.create("rope", head_dim=head_dim, kernel="triton").to(ctx.device)
        impls["posenc kernel='triton'"] = lambda q, k: fast(q, k)
        impls["posenc kernel='triton', tables once"] = lambda q, k: fast.rotate_pair(q, k, tables)
    except ImportError as e:
        skipped["posenc triton kernel"] = f"not installed ({e.name or e})"
    for name, adapter in PEERS.items():
        try:
            impls[name] = adapter(seq, head_dim, q)
        except ImportError as e:
            skipped[name] = f"not installed ({e.name or e})"
        except Exception as e:  # a peer's failure is recorded, never raised
            skipped[name] = f"failed: {type(e).__name__}: {e}"[:300]
    return impls, skipped


def _rope_call(impl: Callable, q, k, grads) -> Callable[[], Any]:
    if grads is None:

        def forward():
            with torch.no_grad():
                return impl(q, k)

        return forward
    leaves = (q.detach().requires_grad_(), k.detach().requires_grad_())

    def forward_backward():
        return torch.autograd.grad(impl(*leaves), leaves, grads)

    return forward_backward


def rope(ctx: Context) -> dict[str, Any]:
    """RoPE of q and k, forward and forward+backward, bf16 and fp32: GB/s of the bytes the
    operation must move (forward: q and k read and written; the backward as much again for
    the gradients; the cos/sin tables not counted) and % of the copy floor's GB/s."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for dtype in (torch.bfloat16, torch.float32):
        q, k, gq, gk = (torch.randn(ctx.sizes.rope, device=ctx.device, dtype=dtype) for _ in "qkgg")
        impls, skipped = _rope_impls(ctx, q)
        with torch.no_grad():
            reference = impls["posenc"](q, k)
        for pass_, grads, moved in (("fwd", None, 4), ("fwd+bwd", (gq, gk), 8)):
            base = {"dtype": _dtype_name(dtype), "pass": pass_}
            for name, impl in impls.items():
                if ctx.past():
                    notes.append(f"past the time budget: stopped before {name}, {pass_}, {dtype}")
                    return {"rows": rows, "notes": notes}
                row: dict[str, Any] = {**base, "impl": name}
                try:
                    call = _rope_call(impl, q, k, grads)
                    row["first_s"] = ctx.first_call(call)
                    if grads is None:
                        with torch.no_grad():
                            out = impl(q, k)
                        row["max abs diff vs posenc"] = max(
                            (a.float() - b.float()).abs().max().item()
                            for a, b in zip(out, reference, strict=True)
                        )
                    row["ms"], row["timer"] = ctx.ms(call)
                    row["GB/s"] = _gbs(moved * q.nbytes, row["ms"])
                    floor = ctx.copy_gbs.get(_dtype_name(dtype))
                    row["% copy"] = 100 * row["GB/s"] / floor if floor else None
                except Exception as e:  # one implementation's failure is a row, not the end
                    row["error"] = f"{type(e).__name__}: {e}"[:300]
                rows.append(row)
            rows += [{**base, "impl": n, "skipped": why} for n, why in skipped.items()]
    failed = _kernel_failures()
    if failed:
        notes.append(f"posenc's compiled kernels fell back to eager: {failed}")
    return {"rows": rows, "notes": notes}


def _kernel_failures() -> dict[str, str]:
    """Why each of posenc's compiled kernels that failed to compile did (then it runs its
    eager function, with one RuntimeWarning)."""
    try:
        from posenc.functional import fire_rows, rope_kernel

        kernels = {"RoPE": rope_kernel.KERNEL, "FIRE": fire_rows._FORWARD}
    except (ImportError, AttributeError):  # moved: nothing to report from here
        return {}
    return {n: k.failed for n, k in kernels.items() if getattr(k, "failed", None)}


# bias encodings through flex ----------------------------------------------------------------


def bias(ctx: Context) -> dict[str, Any]:
    """Every bias encoding through ``posenc.attention(..., backend="flex")`` (an encoding that
    flex refuses: ``auto``, with the reason), forward, bf16, against causal SDPA."""
    b, h, s, d = ctx.sizes.bias
    q, k, v = (torch.randn(b, h, s, d, device=ctx.device, dtype=torch.bfloat16) for _ in "qkv")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with torch.no_grad():
        sdpa_ms, timer = ctx.ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        rows.append({"encoding": "none", "backend": "SDPA causal", "ms": sdpa_ms, "x SDPA": 1.0})
        names = [None] + [n for n in posenc.available() if posenc.info(n).kind == "bias"]
        for name in names:
            if ctx.past():
                notes.append(f"past the time budget: stopped before {name}")
                break
            row: dict[str, Any] = {"encoding": name or "none", "backend": ctx.bias_backend}
            try:
                call = _bias_call(ctx, name, q, k, v, ctx.bias_backend)
                try:
                    row["first_s"] = ctx.first_call(call)
                except ValueError as e:  # the backend refuses this encoding (CoPE): auto
                    row["backend"], row["why"] = "auto", str(e).split("\n")[0][:200]
                    call = _bias_call(ctx, name, q, k, v, "auto")
                    row["first_s"] = ctx.first_call(call)
                row["ms"], row["timer"] = ctx.ms(call)
                row["x SDPA"] = row["ms"] / sdpa_ms
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
    notes.append(
        f"SDPA timed with {timer}; FoX's clock and PaTH's transforms are computed once, "
        "outside the timing"
    )
    return {"rows": rows, "notes": notes}


def _bias_call(ctx: Context, name: str | None, q, k, v, backend: str) -> Callable[[], Any]:
    """One attention call of encoding ``name`` (None: no encoding) on ``backend``."""
    kwargs: dict[str, Any] = {}
    enc = None
    if name is not None:
        b, h, s, d = q.shape
        enc = posenc.build(name, dim=ctx.sizes.fox_dim, head_dim=d, n_heads=h).to(ctx.device)
        x = torch.randn(b, s, ctx.sizes.fox_dim, device=ctx.device)
        if isinstance(enc, InputBias):  # FoX: the clock of the layer's input
            kwargs["bias"] = enc.clock(x)
        if isinstance(enc, InputTransforms):  # PaTH: the transforms of the layer's input
            kwargs["bias"] = enc.transforms(x)
    return lambda: posenc.attention(q, k, v, enc, backend=backend, **kwargs)


# host reads and syncs per forward ----------------------------------------------------------

#: the tensor methods that read a value on the host: a device sync for a CUDA tensor
HOST_READS = frozenset(
    {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "nonzero"}
)


class HostReads(TorchFunctionMode):
    """Counts the calls that read a value of a tensor on ``device`` on the host."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device, self.count = device, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS and args:
            first = args[0]
            if isinstance(first, torch.Tensor) and first.device.type == self.device.type:
                self.count += 1
        return func(*args, **(kwargs or {}))


def _count(ctx: Context, fn: Callable[[], Any]) -> tuple[int, int | None]:
    """``(host reads of device tensors by torch calls, CUDA syncs)`` in one call of ``fn``
    (syncs: CUDA's sync debug mode, which also sees the syncs inside ops and copies; None
    off CUDA)."""
    reads = HostReads(ctx.device)
    if not ctx.cuda:
        with reads:
            fn()
        return reads.count, None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with reads:
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return reads.count, sum("synchroniz" in str(w.message) for w in caught)


def syncs(ctx: Context) -> dict[str, Any]:
    """Per encoding, a 2-layer TransformerLM's host reads and syncs in an inference forward,
    a training forward+backward and a cached decode step (each after one unrecorded call):
    DESIGN.md asks for at most one per forward once its inputs are validated."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    seq = ctx.sizes.sync_seq
    names = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
    if ctx.sizes.sync_names is not None:
        names = [n for n in names if n in ctx.sizes.sync_names]
    for name in names:
        if ctx.past():
            notes.append(f"past the time budget: stopped before {name}")
            break
        row: dict[str, Any] = {"encoding": name}
        try:
            model = TransformerLM(256, 64, 2, 4, encoding=name).to(ctx.device)
            ids = torch.randint(0, 256, (2, seq), device=ctx.device)

            def forward(model=model, ids=ids):
                with torch.no_grad():
                    model(ids)

            def train(model=model, ids=ids):
                model(ids).sum().backward()

            cache = model.new_cache(2, seq + 4)
            with torch.no_grad():
                model(ids, cache=cache)

            def step(model=model, ids=ids, cache=cache):
                with torch.no_grad():
                    model(ids[:, :1], cache=cache)

            for what, fn in (("forward", forward), ("train", train), ("decode step", step)):
                fn()  # first calls build what later ones reuse (compiled kernels, plans)
                row[f"{what} reads"], row[f"{what} syncs"] = _count(ctx, fn)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
    if not ctx.cuda:
        notes.append("syncs: CUDA only; reads count the host reads of CPU tensors here")
    return {"rows": rows, "notes": notes}


# a decode step ------------------------------------------------------------------------------


def _dynamo_counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {cat: dict(c) for cat, c in counters.items()}


def _guard_failures() -> list[str]:
    """Every reason dynamo gave for recompiling so far, one line each (its guard and the
    line of posenc that made it), in order."""
    from torch._dynamo.utils import guard_failures

    return [r.split("\n")[0] for reasons in guard_failures.values() for r in reasons]


def _delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    out = {}
    for cat, values in after.items():
        moved = {
            key[:160]: n - before.get(cat, {}).get(key, 0)
            for key, n in values.items()
            if n != before.get(cat, {}).get(key, 0)
        }
        if moved:
            out[cat] = dict(sorted(moved.items(), key=lambda kv: -kv[1])[:8])
    return out


def _steps(
    ctx: Context, model, step, prompt, n: int, until: float, static: bool = False
) -> dict[str, Any]:
    """Prefill ``prompt`` eagerly, then up to ``n`` greedy one-token steps of ``step`` (each
    timed, synchronised) over a KV cache (``static``: a StaticKVCache, whose shapes never
    change); stops early past ``until``."""
    cache = model.new_cache(1, prompt.shape[1] + n + 1, static=static)
    with torch.no_grad():
        token = model(prompt, cache=cache)[:, -1:].argmax(-1)
        tokens, times, graphs = [], [], []
        for _ in range(n):
            if ctx.past(until):
                break
            before = _dynamo_counters().get("stats", {}).get("unique_graphs", 0)
            ctx.sync()
            start = time.perf_counter()
            token = step(token, cache=cache)[:, -1:].argmax(-1)
            ctx.sync()
            times.append(time.perf_counter() - start)
            tokens.append(int(token))
            graphs.append(_dynamo_counters().get("stats", {}).get("unique_graphs", 0) - before)
    return {"tokens": tokens, "times": times, "graphs": graphs}


def decode(ctx: Context) -> dict[str, Any]:
    """Greedy decoding of one sequence with a KV cache (a RoPE TransformerLM): tokens/s of a
    one-token step, eager, over a static cache, with the Triton kernel, transformers'
    Llama of the same widths eager, under ``torch.compile`` (steps that compiled left out of
    the steady rate; the compiles counted with dynamo's counters) and with CUDA graphs
    (``mode="reduce-overhead"``)."""
    sizes = ctx.sizes
    model = TransformerLM(**sizes.decode, encoding="rope").to(ctx.device).eval()
    prompt = torch.randint(0, sizes.decode["vocab_size"], (1, sizes.prompt), device=ctx.device)
    config = {**sizes.decode, "prompt": sizes.prompt, "batch": 1}
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    eager = _steps(ctx, model, model, prompt, sizes.steps, until=ctx.deadline)
    if not eager["times"]:
        return {"rows": rows, "notes": ["past the time budget: no decode step ran"]}
    step_s = _steady(eager["times"])  # the first: warm-up
    rows.append({"mode": "eager", **config, "steps": len(eager["times"]), "ms": step_s * 1e3})
    rows[-1]["tokens/s"] = 1 / step_s
    fixed = _steps(ctx, model, model, prompt, sizes.steps, until=ctx.deadline, static=True)
    if fixed["times"]:
        fixed_s = _steady(fixed["times"])
        rows.append({"mode": "eager, static cache", **config, "steps": len(fixed["times"])})
        rows[-1].update({"ms": fixed_s * 1e3, "tokens/s": 1 / fixed_s})
        rows[-1]["tokens = eager"] = fixed["tokens"] == eager["tokens"][: len(fixed["tokens"])]
    try:  # RoPE + cache write in one Triton launch per layer (issue 41), same weights
        fast = TransformerLM(**sizes.decode, encoding={"name": "rope", "kernel": "triton"})
        fast = fast.to(ctx.device).eval()
        fast.load_state_dict(model.state_dict())
        fused = _steps(ctx, fast, fast, prompt, sizes.steps, until=ctx.deadline, static=True)
        if fused["times"]:
            fused_s = _steady(fused["times"])
            rows.append({"mode": "eager, static cache, kernel='triton'", **config})
            rows[-1].update({"steps": len(fused["times"]), "ms": fused_s * 1e3})
            rows[-1]["tokens/s"] = 1 / fused_s
            rows[-1]["tokens = eager"] = fused["tokens"] == eager["tokens"][: len(fused["tokens"])]
    except Exception as e:  # no Triton, or its failure: a row that says so
        rows.append({"mode": "eager, static cache, kernel='triton'", "error": f"{e}"[:300]})
    rows.append(_hf_decode(ctx, prompt, config))
    mode = f"torch.compile ({ctx.compile_backend}, fullgraph), static cache"
    row: dict[str, Any] = {"mode": mode, **config}
    before, reasons = _dynamo_counters(), len(_guard_failures())
    start = time.monotonic()
    try:
        compiled = torch.compile(model, backend=ctx.compile_backend, fullgraph=True)
        until = start + (120 if ctx.cuda else 30)
        run = _steps(ctx, model, compiled, prompt, sizes.compiled_steps, until, static=True)
        steady = [t for t, g in zip(run["times"], run["graphs"], strict=True) if g == 0]
        row["steps"] = len(run["times"])
        row["compiling steps"] = sum(1 for g in run["graphs"] if g)
        if steady:
            row["ms"] = statistics.median(steady) * 1e3
            row["tokens/s"] = 1e3 / row["ms"]
        n = len(run["tokens"])
        row["tokens = eager"] = run["tokens"] == eager["tokens"][:n]
        if len(run["times"]) < sizes.compiled_steps:
            notes.append(f"compiled decode stopped after {n} steps: its time budget")
        dynamo_config = torch._dynamo.config
        limit = getattr(
            dynamo_config, "recompile_limit", getattr(dynamo_config, "cache_size_limit", 8)
        )
        if row["compiling steps"] >= limit:
            notes.append(f"{limit} compiles: dynamo's recompile limit; later steps ran eagerly")
    except Exception as e:  # a compile failure is a result, never the end of the run
        row["error"] = f"{type(e).__name__}: {e}"[:500]
    row["compile_s"] = time.monotonic() - start
    dynamo = _delta(before, _dynamo_counters())
    row["graphs"] = dynamo.get("stats", {}).get("unique_graphs", 0)
    row["graph breaks"] = sum(dynamo.get("graph_break", {}).values())
    rows.append(row)
    recompiles = list(dict.fromkeys(r.split(": ", 1)[-1] for r in _guard_failures()[reasons:]))
    notes += [f"recompiled on `{' '.join(r.split())[:300]}`" for r in recompiles[:6]]
    graphs = _graphed_decode(ctx, model, prompt, config, eager["tokens"])
    rows.append(graphs)
    if not ctx.cuda:
        notes.append(
            f"dry run: the CUDA graphs row compiles with {ctx.compile_backend!r}, no graph"
        )
    return {"rows": rows, "notes": notes, "dynamo": dynamo, "recompiles": recompiles}


def _steady(times: list[float]) -> float:
    """Seconds of a steady step: the median of the steps after the first (a warm-up)."""
    return statistics.median(times[1:] or times)


def _hf_decode(ctx: Context, prompt: torch.Tensor, config: dict[str, Any]) -> dict[str, Any]:
    """Greedy decoding of ``prompt`` by transformers' ``LlamaForCausalLM`` of the decode
    model's widths (:func:`posenc.bench.peers.hf_llama`, built on the device), eager, with
    its ``DynamicCache``: the peer's tokens/s (its weights are its own: no token check)."""
    from posenc.bench.peers import hf_llama

    row: dict[str, Any] = {"mode": "transformers LlamaForCausalLM eager, DynamicCache", **config}
    sizes = {"mlp_ratio": _MLP_RATIO, **ctx.sizes.decode}
    try:
        with torch.device(ctx.device):
            llama, new_cache, kwarg = hf_llama(**sizes)
        cache = {kwarg: new_cache(), "use_cache": True}
        times = []
        with torch.no_grad():
            token = llama(input_ids=prompt, **cache).logits[:, -1:].argmax(-1)
            for _ in range(ctx.sizes.steps):
                if ctx.past():
                    break
                ctx.sync()
                start = time.perf_counter()
                token = llama(input_ids=token, **cache).logits[:, -1:].argmax(-1)
                ctx.sync()
                times.append(time.perf_counter() - start)
        row["steps"] = len(times)
        if times:
            row["ms"] = _steady(times) * 1e3
            row["tokens/s"] = 1e3 / row["ms"]
    except ImportError as e:
        row["skipped"] = f"not installed ({e.name or e})"
    except Exception as e:  # the peer's failure is a row, never the end of the section
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    return row


#: TransformerLM's default MLP width, as a multiple of dim (the decode sizes give none)
_MLP_RATIO = inspect.signature(TransformerLM).parameters["mlp_ratio"].default


def _graphed_decode(
    ctx: Context, model, prompt: torch.Tensor, config: dict[str, Any], eager: list[int]
) -> dict[str, Any]:
    """The one-token step with CUDA graphs: ``torch.compile(mode="reduce-overhead")`` of a
    :class:`~posenc.models.DecodeStep` (the model and its static cache as one module whose
    buffers are the cache's tensors, so the graphs may write them in place), after an
    eager prompt; tokens/s of the steps after the first two (compiling, recording), whether
    its tokens equal eager's, and inductor's count of CUDA graphs it skipped (with why,
    where torch logged it)."""
    from posenc.models import DecodeStep

    mode = "torch.compile (reduce-overhead: CUDA graphs), DecodeStep, static cache"
    if not ctx.cuda:
        mode = f"torch.compile ({ctx.compile_backend}), DecodeStep, static cache"
    row: dict[str, Any] = {"mode": mode, **config}
    n = ctx.sizes.compiled_steps + 2  # the first two compile and record
    skips_before = _dynamo_counters().get("inductor", {}).get("cudagraph_skips", 0)
    start = time.monotonic()
    until = start + (60 if ctx.cuda else 30)
    try:
        cache = model.new_cache(1, prompt.shape[1] + n + 1, static=True)
        with torch.no_grad():
            token = model(prompt, cache=cache)[:, -1:].argmax(-1)
            step = DecodeStep(model, cache)
            if ctx.cuda:
                graphed = torch.compile(step, mode="reduce-overhead", fullgraph=True)
            else:
                graphed = torch.compile(step, backend=ctx.compile_backend, fullgraph=True)
            tokens, times = [], []
            for _ in range(n):
                if ctx.past(until):
                    break
                torch.compiler.cudagraph_mark_step_begin()
                ctx.sync()
                begin = time.perf_counter()
                token = graphed(token)[:, -1:].argmax(-1)
                ctx.sync()
                times.append(time.perf_counter() - begin)
                tokens.append(int(token))
        row["steps"] = len(times)
        if len(times) > 2:
            row["ms"] = statistics.median(times[2:]) * 1e3
            row["tokens/s"] = 1e3 / row["ms"]
        row["first_s"] = sum(times[:2])
        row["tokens = eager"] = tokens == eager[: len(tokens)]
    except Exception as e:  # a capture failure is a result, never the end of the run
        row["error"] = f"{type(e).__name__}: {e}"[:500]
    row["compile_s"] = time.monotonic() - start
    if ctx.cuda:
        skips = _dynamo_counters().get("inductor", {}).get("cudagraph_skips", 0)
        row["cudagraph skips"] = skips - skips_before
    return row


SECTIONS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "copy": copy_floor,
    "rope": rope,
    "bias": bias,
    "syncs": syncs,
    "decode": decode,
}
