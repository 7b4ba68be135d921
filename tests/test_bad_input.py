"""Bad input, all of it: every public entry point fed what a new user might feed it.

Driven like the conformance suite, by :func:`posenc.available` (plus a :func:`posenc.compose`
of two encodings), and by every public entry point: ``create``, the encodings' calls
(``encode``/``forward``, ``forward``/``rotation``, ``bias``/``score_mod``), ``attention``,
``TransformerLM`` forward and ``generate``, ``rope_from_hf_config``, ``extend_context``,
``positions.grid``, ``positions.multimodal``, ``positions.tmrope``, ``compose``, and what
the last wave added (``KVCache``, ``new_cache`` and the model's check of a given cache,
``LayerPlan``, ``hf.layer_plan``). Each case expects one of two outcomes:

- a ``TypeError`` or ``ValueError`` whose message names the argument, raised by posenc
  itself (the innermost frame of the traceback is a posenc source file: never a raw error
  from inside torch);
- a documented correct result, compared in full with a reference: any integer dtype of
  positions (uint8 .. uint64) gives exactly the int64 result, any float dtype the result of
  the same values, an empty sequence an empty result; never a silent NaN or wrong value.

The classes of bad input: every integer, float, bool and complex dtype of positions; NaN,
inf, negative, huge (past 2**53) and non-tensor positions; wrong rank, length and batch;
empty sequences; positions on the meta device beside real inputs; wrong inputs (dtype,
rank, size, batch, device); huge or tiny finite configuration values (``MAX_FLOAT``,
``MAX_INT``); bad factory keywords; and each entry point's own arguments (``scale``,
``temperature``, ``normalize``, token ids, caches, Hugging Face config keys).

The matrix (kept true by :func:`test_matrix_size_is_recorded`): 2815 cases: 1446 expect a
ValueError, 511 a TypeError, 858 a correct result. By family: dtype 854, positions 713,
input 236, config 746, attention 83, model 69, hf 36, positions.grid 9, positions.multimodal
20, compose 10, other 9, cache 28, positions.tmrope 2.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.base import InputBias, InputTransforms, ScoreBias, ScoreWeights
from posenc.config import MAX_POSITION
from posenc.hf import extend_context, rope_from_hf_config
from posenc.models import TransformerLM
from posenc.positions import grid, multimodal
from posenc.rotary.scaling import SCALING_CONFIGS

SIZE, BATCH, HEADS, SEQ = 8, 2, 2, 6
GRID_W = 3
#: positions far from 0 and out of order, so that ``i - j`` is negative for half the pairs
#: (uint8 would wrap) and every value fits int8 and float16 exactly
P = torch.tensor([103, 100, 105, 101, 104, 102])
EXTRA_CONFIG: dict[str, dict[str, Any]] = {
    "shaw": {"head_dim": 4},
    "fox": {"dim": SIZE},
    "path": {"dim": SIZE, "head_dim": 4},
    "pope": {"n_heads": HEADS},
    "cope": {"head_dim": 4},
    "sincos_2d": {"grid": (SEQ // GRID_W, GRID_W)},
    "rope_2d": {"grid": (SEQ // GRID_W, GRID_W)},
    "rope_mixed": {"grid": (SEQ // GRID_W, GRID_W), "n_heads": HEADS},
    "learned_2d": {"grid": (int(P.max()) // GRID_W + 1, GRID_W)},
}
COMPOSE = "compose(sinusoidal, learned)"
#: configurations whose math differs from the default's where a dtype could break it
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "alibi(symmetric)": ("alibi", {"symmetric": True}),
    "t5(bidirectional)": ("t5", {"bidirectional": True, "init_std": 1.0}),
    "kerple(power)": ("kerple", {"variant": "power"}),
    "shaw(values)": ("shaw", {"values": True}),
}
ENCODINGS = [*posenc.available(), COMPOSE, *VARIANTS]
INT_DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SRC = Path(posenc.__file__).parent


@functools.cache
def make(name: str) -> posenc.Encoding:
    """The encoding ``name`` at the matrix's sizes (built once: calls do not change it)."""
    if name == COMPOSE:
        return posenc.compose("sinusoidal", "learned", dim=SIZE)
    name, variant = VARIANTS.get(name, (name, {}))
    key = posenc.registry.get(name).size_key
    config: dict[str, Any] = {} if key is None else {key: SIZE}
    return posenc.create(name, **config, **EXTRA_CONFIG.get(name, {}), **variant)


def gen(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


X = gen(BATCH, SEQ, SIZE)
Q, K = gen(BATCH, HEADS, SEQ, SIZE, seed=1), gen(BATCH, HEADS, SEQ, SIZE, seed=2)


def as_positions(enc: posenc.Encoding, p: torch.Tensor) -> torch.Tensor:
    """``p`` as ``enc`` takes it: unchanged, grid coordinates ``[..., 2]`` (row, col), or
    video coordinates ``[..., 3]`` (frame 0, row, col) for ``rope_3d``."""
    if enc.position_axes == 1:
        return p
    if enc.position_axes == 3:
        return torch.stack((p * 0, p // GRID_W, p % GRID_W), dim=-1)
    return torch.stack((p // GRID_W, p % GRID_W), dim=-1)


def observed(enc: posenc.Encoding):
    """What a bias encoding puts on the scores (``bias``), or a stick-breaking one's weights
    (``weights``: it has no bias)."""
    return enc.weights if isinstance(enc, ScoreWeights) else enc.bias


def bias_inputs(enc: posenc.Encoding, q_len: int = SEQ, k_len: int | None = None) -> dict[str, Any]:
    """``{"q": ...}`` for a bias that depends on the queries, ``{"x": ...}`` (the keys'
    tokens) for one that reads the layer's input (FoX), else {}."""
    if enc.kind != "bias":
        return {}
    if isinstance(enc, InputBias):
        return {"x": X[:, : q_len if k_len is None else k_len]}
    if isinstance(enc, InputTransforms):  # PaTH: the queries, the keys and the layer input
        k_len = q_len if k_len is None else k_len
        q = gen(BATCH, SIZE, q_len, 4, seed=3)
        return {"q": q, "k": gen(BATCH, SIZE, k_len, 4, seed=4), "x": X[:, :k_len]}
    if not enc.needs_q:
        return {}
    head_dim = getattr(enc.config, "head_dim", 4)  # stick-breaking takes any
    q = gen(BATCH, SIZE, q_len, head_dim, seed=3)
    if isinstance(enc, ScoreBias | ScoreWeights):  # CoPE, stick-breaking: the keys too
        k = gen(BATCH, SIZE, q_len if k_len is None else k_len, head_dim, seed=4)
        return {"q": q, "k": k}
    return {"q": q}


def materialise(mod, n_heads: int, q_len: int, k_len: int, device: Any = None) -> torch.Tensor:
    """A flex-attention ``score_mod`` evaluated at every (batch, head, query, key) at once."""
    b = torch.arange(BATCH, device=device).view(-1, 1, 1, 1)
    h = torch.arange(n_heads, device=device).view(1, -1, 1, 1)
    qi = torch.arange(q_len, device=device).view(1, 1, -1, 1)
    ki = torch.arange(k_len, device=device).view(1, 1, 1, -1)
    return mod(torch.zeros((), device=device), b, h, qi, ki)


def entry_points(enc: posenc.Encoding) -> dict[str, Callable[..., Any]]:
    """The calls of an encoding's kind, as ``fn(positions, **inputs)`` (queries and keys at
    the same positions); ``inputs`` override x, q, k of the right length."""
    kind = enc.kind

    def seq_of(p: Any) -> int:
        if not isinstance(p, torch.Tensor):
            return len(p)
        return p.shape[-2] if enc.position_axes > 1 and p.dim() > 1 else p.shape[-1]

    if kind in ("additive", "none"):
        points = {"forward": lambda p, x=None: enc(X[:, : seq_of(p)] if x is None else x, p)}
        if kind == "additive":
            points["encode"] = lambda p: enc.encode(p)
        return points
    if kind == "rotary":
        return {
            "forward": lambda p, q=None, k=None: enc(
                Q[:, :, : seq_of(p)] if q is None else q,
                K[:, :, : seq_of(p)] if k is None else k,
                positions=p,
            ),
            "rotation": lambda p: enc.rotation(p),
        }
    points = {
        "bias": lambda p, k_p=None: observed(enc)(
            p,
            p if k_p is None else k_p,
            **bias_inputs(enc, seq_of(p), seq_of(p if k_p is None else k_p)),
        ),
        "score_mod": lambda p, k_p=None: materialise(
            enc.score_mod(p, p if k_p is None else k_p, **bias_inputs(enc, seq_of(p))),
            SIZE,
            seq_of(p),
            seq_of(p if k_p is None else k_p),
            p.device if isinstance(p, torch.Tensor) else None,
        ),
    }
    # FoX, CoPE, PaTH, stick-breaking: no score_mod
    if isinstance(enc, (InputBias, ScoreBias, InputTransforms, ScoreWeights)):
        del points["score_mod"]
    return points


# The cases -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input: ``call()`` raises ``raises`` with ``match`` in its message, or (when
    ``raises`` is None) returns what ``expected()`` returns, within ``tol``."""

    id: str
    call: Callable[[], Any]
    raises: type[Exception] | None = None
    match: str = ""
    expected: Callable[[], Any] | None = None
    tol: float = 0.0

    @property
    def outcome(self) -> str:
        return "result" if self.raises is None else self.raises.__name__


CASES: list[Case] = []


def raises(id: str, call: Callable[[], Any], exc: type[Exception], match: str) -> None:
    CASES.append(Case(id, call, exc, match))


def result(id: str, call: Callable[[], Any], expected: Callable[[], Any], tol: float = 0.0):
    CASES.append(Case(id, call, expected=expected, tol=tol))


def positions_dtype_cases() -> None:
    """Every dtype of positions through every call: integers exact, floats the same values."""
    for name in ENCODINGS:
        enc = make(name)
        for point, fn in entry_points(enc).items():
            base = f"dtype/{name}/{point}"
            ref = functools.partial(lambda enc, fn: fn(as_positions(enc, P)), enc, fn)
            for dtype in INT_DTYPES:
                call = functools.partial(
                    lambda enc, fn, dtype: fn(as_positions(enc, P).to(dtype)), enc, fn, dtype
                )
                result(f"{base}/{dtype}", call, ref)
            for dtype in FLOAT_DTYPES:
                call = functools.partial(
                    lambda enc, fn, dtype: fn(as_positions(enc, P).to(dtype)), enc, fn, dtype
                )
                if enc.integer_positions:
                    raises(f"{base}/{dtype}", call, TypeError, "positions must be integer")
                else:
                    result(f"{base}/{dtype}", call, ref, tol=1e-5)
            for dtype in (torch.bool, torch.complex64):
                call = functools.partial(
                    lambda enc, fn, dtype: fn(as_positions(enc, P).to(dtype)), enc, fn, dtype
                )
                raises(f"{base}/{dtype}", call, TypeError, "positions must be an integer or float")


def positions_value_cases() -> None:
    """Non-finite, negative, huge, misshapen, empty and misplaced positions."""
    for name in ENCODINGS:
        enc = make(name)
        grid_axes = enc.position_axes > 1
        for point, fn in entry_points(enc).items():
            base = f"positions/{name}/{point}"

            def at(value: Any, dtype=None, enc=enc, fn=fn) -> Callable[[], Any]:
                def call():
                    p = as_positions(enc, P).clone()
                    p = p.to(dtype) if dtype is not None else p
                    p.view(-1)[1] = value
                    return fn(p)

                return call

            if enc.integer_positions:
                for label in ("nan", "inf"):
                    raises(
                        f"{base}/{label}",
                        at(float(label), torch.float64),
                        TypeError,
                        "must be integer",
                    )
            else:
                for label in ("nan", "inf", "-inf"):
                    raises(f"{base}/{label}", at(float(label), torch.float32), ValueError, "finite")
            if enc.nonnegative_positions:
                raises(f"{base}/negative", at(-1), ValueError, r"positions must be >= 0, got -1")
            else:  # grid coordinates may be negative: the rotation or sin-cos of -1
                flip = functools.partial(
                    lambda enc, fn: fn(as_positions(enc, P) * torch.tensor([1, -1])), enc, fn
                )
                mirror = functools.partial(
                    lambda enc, fn, sign: fn(as_positions(enc, P) * sign),
                    enc,
                    fn,
                    torch.tensor([1.0, -1.0]),
                )
                result(f"{base}/negative", flip, mirror)
            raises(f"{base}/huge", at(2**60), ValueError, r"positions|position \d+")
            if not enc.integer_positions:
                raises(f"{base}/huge_float", at(1e300, torch.float64), ValueError, "positions")
                raises(
                    f"{base}/past_2**53",
                    at(float(MAX_POSITION) * 2, torch.float64),
                    ValueError,
                    "positions",
                )
            raises(
                f"{base}/not_a_tensor",
                functools.partial(lambda enc, fn: fn(as_positions(enc, P).tolist()), enc, fn),
                TypeError,
                "positions must be a torch.Tensor",
            )
            wrong_rank = (
                (lambda fn=fn: fn(P)) if grid_axes else (lambda fn=fn: fn(P.view(1, 1, SEQ)))
            )
            if name == "mrope":  # [3, batch, seq] is its own shape: 4-D is wrong
                wrong_rank = functools.partial(lambda fn: fn(P.view(1, 1, 1, SEQ)), fn)
            raises(f"{base}/rank", wrong_rank, ValueError, "positions must be")
            empty = functools.partial(lambda enc, fn: fn(as_positions(enc, P[:0])), enc, fn)
            result(f"{base}/empty", empty, functools.partial(expected_empty, enc, point))
            meta = functools.partial(lambda enc, fn: fn(as_positions(enc, P).to("meta")), enc, fn)
            # real inputs beside them: the forward's, parameters, or the q and k a bias reads
            real = any(True for _ in enc.parameters()) or getattr(enc, "needs_q", False)
            if point == "forward" or real:
                raises(f"{base}/meta", meta, ValueError, "positions is on meta")
            else:  # nothing real beside them: a shape-only meta computation, as documented
                result(f"{base}/meta", meta, functools.partial(meta_like, enc, fn))
            if point == "forward":
                raises(
                    f"{base}/length",
                    functools.partial(
                        lambda enc, fn: fn(as_positions(enc, torch.arange(SEQ + 1)), **full(enc)),
                        enc,
                        fn,
                    ),
                    ValueError,
                    rf"positions has {SEQ + 1} positions",
                )
                raises(
                    f"{base}/batch",
                    functools.partial(
                        lambda enc, fn: fn(as_positions(enc, P.expand(BATCH + 1, SEQ))), enc, fn
                    ),
                    ValueError,
                    rf"positions has batch size {BATCH + 1}",
                )
            if enc.kind == "bias":
                raises(
                    f"{base}/batch_q_k",
                    functools.partial(
                        lambda fn: fn(P.expand(BATCH, SEQ), k_p=P.expand(BATCH + 1, SEQ)), fn
                    ),
                    ValueError,
                    rf"k_positions has batch size {BATCH + 1}",
                )
                raises(
                    f"{base}/device_q_k",
                    functools.partial(lambda fn: fn(P, k_p=P.to("meta")), fn),
                    ValueError,
                    "k_positions is on meta",
                )


def full(enc: posenc.Encoding) -> dict[str, torch.Tensor]:
    """Inputs of SEQ tokens for a call that is given SEQ + 1 positions."""
    if enc.kind == "rotary":
        return {"q": Q, "k": K}
    return {"x": X}


def expected_empty(enc: posenc.Encoding, point: str) -> Any:
    """The documented result of an empty sequence: empty outputs of the right shapes."""
    if enc.kind in ("additive", "none"):
        return X[:, :0] if point == "forward" else torch.empty(0, SIZE)
    if enc.kind == "rotary":
        if point == "forward":  # PoPE's q and k come out twice as wide
            return tuple(t[:, :, :0].repeat(1, 1, 1, enc.width_factor) for t in (Q, K))
        return tuple(t[..., :0, :] for t in enc.rotation(as_positions(enc, P)))
    if enc.needs_q or isinstance(enc, InputBias):  # the bias depends on each batch element's inputs
        return torch.empty(BATCH, SIZE, 0, 0)
    return torch.empty(*((1, SIZE) if point == "score_mod" else (SIZE,)), 0, 0)


def meta_like(enc: posenc.Encoding, fn) -> Any:
    """The result of ``fn`` at real positions, moved to the meta device (shapes, dtypes)."""
    out = fn(as_positions(enc, P))
    return tuple(t.to("meta") for t in out) if isinstance(out, tuple) else out.to("meta")


def input_cases() -> None:
    """Wrong x, q, k: dtype, rank, size, batch, device, and the calls' other arguments."""
    for name in ENCODINGS:
        enc = make(name)
        base = f"input/{name}"
        if enc.kind in ("additive", "none"):
            bad_x = {
                "int": (X.long(), TypeError, "x must be a floating-point tensor"),
                "list": (X.tolist(), TypeError, "x must be a floating-point tensor"),
                "rank": (X[0], ValueError, r"x must be \[batch, seq, dim\]"),
            }
            if enc.kind == "additive":
                bad_x["dim"] = (gen(BATCH, SEQ, SIZE + 2), ValueError, rf"dim={SIZE}")
                raises(
                    f"{base}/encode_int_dtype",
                    functools.partial(
                        lambda enc: enc.encode(as_positions(enc, P), torch.long), enc
                    ),
                    TypeError,
                    "dtype must be a floating-point torch.dtype",
                )
            if any(True for _ in enc.parameters()):
                bad_x["meta"] = (X.to("meta"), ValueError, "x is on meta")
            for label, (x, exc, match) in bad_x.items():
                raises(
                    f"{base}/x_{label}",
                    functools.partial(lambda enc, x: enc(x, as_positions(enc, P)), enc, x),
                    exc,
                    match,
                )
        elif enc.kind == "rotary":
            for who in ("q", "k"):
                bad = {
                    "int": (Q.long(), TypeError, f"{who} must be a floating-point tensor"),
                    "rank": (Q[0], ValueError, rf"{who} must be \[batch, heads, seq, head_dim\]"),
                    "head_dim": (gen(BATCH, HEADS, SEQ, SIZE + 2), ValueError, f"{who} must be"),
                    "batch": (gen(BATCH + 1, HEADS, SEQ, SIZE), ValueError, "q and k"),
                }
                for label, (t, exc, match) in bad.items():
                    args = {"q": Q, "k": K, who: t}
                    raises(
                        f"{base}/{who}_{label}",
                        functools.partial(
                            lambda enc, args: enc(args["q"], args["k"], as_positions(enc, P)),
                            enc,
                            args,
                        ),
                        exc,
                        match,
                    )
            for seq_len, exc in ((0, ValueError), (-1, ValueError), (2.5, TypeError)):
                raises(
                    f"{base}/seq_len_{seq_len}",
                    functools.partial(
                        lambda enc, s: enc(Q, K, as_positions(enc, P), seq_len=s), enc, seq_len
                    ),
                    exc,
                    "seq_len must be",
                )
        elif isinstance(enc, InputBias):
            for label, bad_x, exc, match in (
                ("x_missing", None, TypeError, "pass x="),
                ("x_int", X.long(), TypeError, "x must be a floating-point"),
                ("x_dim", gen(BATCH, SEQ, SIZE + 1), ValueError, r"x must be \[batch, seq, dim"),
                ("x_len", X[:, :2], ValueError, "x must hold the 6 keys"),
            ):
                raises(
                    f"{base}/{label}",
                    functools.partial(lambda enc, x: enc.bias(P, P, x=x), enc, bad_x),
                    exc,
                    match,
                )
        else:
            q = bias_inputs(enc)
            keys = {name: t for name, t in q.items() if name != "q"}  # CoPE's k
            if q:
                batched = P.expand(BATCH, SEQ)
                for label, bad_q, p, exc, match in (
                    ("q_missing", None, P, TypeError, "pass q="),
                    ("q_int", q["q"].long(), P, TypeError, "q must be a floating-point"),
                    ("q_heads", q["q"][:, :1], P, ValueError, r"q must be \[batch, heads"),
                    ("q_len", q["q"][:, :, :1], P, ValueError, "q_positions has 6 positions"),
                    (
                        "q_batch",
                        gen(BATCH + 1, SIZE, SEQ, 4),
                        batched,
                        ValueError,
                        "q_positions has batch size",
                    ),
                ):
                    raises(
                        f"{base}/{label}",
                        functools.partial(
                            lambda enc, q, p, kw: observed(enc)(p, p, q=q, **kw),
                            enc,
                            bad_q,
                            p,
                            keys,
                        ),
                        exc,
                        match,
                    )
                for scale, exc in ((0.0, ValueError), (math.nan, ValueError), ("1", TypeError)):
                    raises(
                        f"{base}/scale_{scale}",
                        functools.partial(
                            lambda enc, s, q, kw: observed(enc)(P, P, q=q, scale=s, **kw),
                            enc,
                            scale,
                            q["q"],
                            keys,
                        ),
                        exc,
                        "scale must be",
                    )
            if isinstance(enc, ScoreBias | ScoreWeights):  # its keys, and no score_mod
                for label, bad_k, exc, match in (
                    ("k_missing", None, TypeError, "pass k="),
                    ("k_int", keys["k"].long(), TypeError, "k must be a floating-point"),
                    ("k_head_dim", keys["k"][..., :1], ValueError, r"k must be \[batch, heads"),
                    ("k_len", keys["k"][:, :, :1], ValueError, "k must be .* k_len the keys"),
                ):
                    raises(
                        f"{base}/{label}",
                        functools.partial(
                            lambda enc, k, q: observed(enc)(P, P, q=q, k=k), enc, bad_k, q["q"]
                        ),
                        exc,
                        match,
                    )
                continue
            if isinstance(enc, InputTransforms):  # PaTH: its keys and input, and no score_mod
                for label, given, exc, match in (
                    ("k_missing", {"k": None}, TypeError, "pass k="),
                    ("x_missing", {"x": None}, TypeError, "pass x="),
                    ("x_dim", {"x": gen(BATCH, SEQ, SIZE + 1)}, ValueError, r"x must be \[batch"),
                ):
                    raises(
                        f"{base}/{label}",
                        functools.partial(
                            lambda enc, kw: enc.bias(P, P, **kw), enc, {**q, **given}
                        ),
                        exc,
                        match,
                    )
                continue
            for offset, exc in ((-1, ValueError), (1.5, TypeError)):
                raises(
                    f"{base}/q_offset_{offset}",
                    functools.partial(
                        lambda enc, o, q: enc.score_mod(q_offset=o, **q), enc, offset, q
                    ),
                    exc,
                    "q_offset must be",
                )


def config_value(field: dataclasses.Field) -> list[tuple[str, Any]]:
    """Huge (and tiny) values of an int or float configuration field, else []."""
    annotation = field.type if isinstance(field.type, str) else field.type.__name__
    if annotation.startswith("int"):
        return [("2**40", 2**40), ("2**63", 2**63), ("10**400", 10**400)]
    if annotation.startswith("float"):
        return [("1e39", 1e39), ("1e300", 1e300), ("1e-300", 1e-300), ("10**400", 10**400)]
    return []


def config_cases() -> None:
    """Huge finite values of every int and float key, bad factory keywords, bad scalings."""
    for name in posenc.available():
        cls = posenc.registry.get(name)
        good = {
            **({} if cls.size_key is None else {cls.size_key: SIZE}),
            **EXTRA_CONFIG.get(name, {}),
        }
        for field in dataclasses.fields(cls.Config):
            for label, value in config_value(field):
                config = {**good, field.name: value}
                raises(
                    f"config/{name}/{field.name}={label}",
                    functools.partial(lambda name, c: posenc.create(name, **c), name, config),
                    ValueError,
                    rf"\b{field.name}\b",
                )
        for label, kwargs, exc, match in (
            ("dtype_int", {"dtype": torch.long}, TypeError, "dtype must be"),
            ("dtype_str", {"dtype": "float32"}, TypeError, "dtype must be"),
            ("device_bogus", {"device": "bogus"}, ValueError, "device must"),
            ("device_float", {"device": 1.5}, TypeError, "device must"),
        ):
            raises(
                f"config/{name}/{label}",
                functools.partial(
                    lambda name, c: posenc.create(name, **c), name, {**good, **kwargs}
                ),
                exc,
                match,
            )
    raises(
        "config/alibi/slopes=1e39",
        lambda: posenc.create("alibi", n_heads=2, slopes=[0.5, 1e39]),
        ValueError,
        r"slopes\[1\]",
    )
    # every float or int key of every rope scaling record, huge, in rope, xpos and mrope
    needed = {
        "factor": 2.0,
        "original_max_position_embeddings": 16,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "short_factor": [1.0] * (SIZE // 2),
        "long_factor": [2.0] * (SIZE // 2),
    }
    for rope_type, record in SCALING_CONFIGS.items():
        fields = {f.name: f for f in dataclasses.fields(record)}
        base = {k: v for k, v in needed.items() if k in fields}
        for key, field in fields.items():
            for label, value in config_value(field):
                scaling = {"rope_type": rope_type, **base, key: value}
                for name in ("rope", "xpos", "mrope"):
                    if name == "mrope" and record.depends_on_length:
                        continue
                    raises(
                        f"config/{name}/scaling_{rope_type}_{key}={label}",
                        functools.partial(
                            lambda n, s: posenc.create(n, head_dim=SIZE, scaling=s), name, scaling
                        ),
                        ValueError,
                        rf"\b{key}\b",
                    )


def attention_cases() -> None:
    """posenc.attention: its own arguments, and every dtype of positions for every rotary
    and bias encoding of one axis."""
    v = gen(BATCH, HEADS, SEQ, SIZE, seed=4)
    alibi = posenc.create("alibi", n_heads=HEADS)
    for label, kwargs, exc, match in (
        ("encoding_name", {"encoding": "alibi"}, TypeError, "encoding must be"),
        ("encoding_int", {"encoding": 3}, TypeError, "encoding must be"),
        ("scale_0", {"scale": 0.0}, ValueError, "scale must be"),
        ("scale_negative", {"scale": -1.0}, ValueError, "scale must be"),
        ("scale_nan", {"scale": math.nan}, ValueError, "scale must be"),
        ("scale_inf", {"scale": math.inf}, ValueError, "scale must be"),
        ("scale_str", {"scale": "1"}, TypeError, "scale must be"),
        ("scale_0_alibi", {"scale": 0.0, "encoding": alibi}, ValueError, "scale must be"),
        (
            "positions_batch",
            {"q_positions": P.expand(BATCH, SEQ), "k_positions": P.expand(BATCH + 1, SEQ)},
            ValueError,
            "k_positions has batch size",
        ),
        (
            "positions_batch_alibi",
            {
                "encoding": alibi,
                "q_positions": P.expand(BATCH + 1, SEQ),
                "k_positions": P.expand(BATCH, SEQ),
            },
            ValueError,
            "q_positions has batch size",
        ),
        (
            "positions_nan",
            {
                "q_positions": P.double().index_fill(0, torch.tensor([1]), math.nan),
                "k_positions": P,
            },
            ValueError,
            "q_positions must be finite",
        ),
        (
            "positions_meta",
            {"q_positions": P.to("meta"), "k_positions": P},
            ValueError,
            "q_positions is on meta",
        ),
    ):
        raises(
            f"attention/{label}",
            functools.partial(lambda kw: posenc.attention(Q, K, v, **kw), kwargs),
            exc,
            match,
        )
    for label, q, k in (
        ("zero_heads", Q[:, :0], K[:, :0]),
        ("head_dim_0", Q[..., :0], K[..., :0]),
        ("empty_q", Q[:, :, :0], K),
        ("empty_k", Q[:, :, :0], K[:, :, :0]),
    ):
        raises(
            f"attention/{label}",
            functools.partial(lambda q, k: posenc.attention(q, k, k), q, k),
            ValueError,
            r"\b[qk]\b must",
        )
    for name in posenc.available():
        enc = posenc.registry.get(name)
        if enc.kind not in ("rotary", "bias") or enc.position_axes != 1:
            continue
        size = {"rotary": {"head_dim": SIZE}, "bias": {"n_heads": HEADS}}[enc.kind]
        extra = {
            "shaw": {"head_dim": SIZE},
            "cope": {"head_dim": SIZE},
            "fox": {"dim": SIZE},
            "path": {"dim": SIZE, "head_dim": SIZE},
            "pope": {"n_heads": HEADS},
        }
        extra = extra.get(name, {})
        built = posenc.create(name, **size, **extra)
        clock = {"bias": built.clock(X)} if isinstance(built, InputBias) else {}
        pos = P
        if isinstance(built, InputTransforms):  # PaTH: its transforms, keys in sequence order
            clock, pos = {"bias": built.transforms(X)}, P.sort().values
        ref = functools.partial(
            lambda e, c, p: posenc.attention(
                Q, K, v, encoding=e, q_positions=p, k_positions=p, **c
            ),
            built,
            clock,
            pos,
        )
        for dtype in (torch.uint8, torch.int16, torch.int32, torch.uint32):
            result(
                f"attention/{name}/{dtype}",
                functools.partial(
                    lambda e, d, c, p: posenc.attention(
                        Q, K, v, encoding=e, q_positions=p.to(d), k_positions=p.to(d), **c
                    ),
                    built,
                    dtype,
                    clock,
                    pos,
                ),
                ref,
            )


def lm(encoding: Any = "rope") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=11, dim=16, n_layers=1, n_heads=2, encoding=encoding).eval()


def model_cases() -> None:
    """TransformerLM: token ids, generate's arguments, caches, grid encodings."""
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 10]])
    model = functools.cache(lm)
    for label, bad, exc, match in (
        ("too_large", ids + 1, ValueError, "input_ids must be in"),
        ("negative", ids - 2, ValueError, "input_ids must be in"),
        ("bool", ids.bool(), TypeError, "input_ids must be an integer"),
        ("float", ids.float(), TypeError, "input_ids must be an integer"),
        ("list", ids.tolist(), TypeError, "input_ids must be a torch.Tensor"),
        ("rank", ids[0], ValueError, "input_ids must be"),
    ):
        raises(f"model/forward/ids_{label}", lambda bad=bad: model()(bad), exc, match)
        raises(f"model/generate/ids_{label}", lambda bad=bad: model().generate(bad, 2), exc, match)
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32):
        result(
            f"model/forward/ids_{dtype}",
            lambda dtype=dtype: model()(ids.to(dtype)),
            lambda: model()(ids),
        )
        result(
            f"model/generate/ids_{dtype}",
            lambda dtype=dtype: model().generate(ids.to(dtype), 3),
            lambda: model().generate(ids, 3),
        )
    # explicit positions of every kind of encoding, in other integer dtypes, with a cache
    positions = torch.tensor([7, 3, 9, 4])
    for name in ("learned", "rope", "alibi", "t5"):
        for dtype in (torch.uint8, torch.int16, torch.uint32):
            result(
                f"model/forward/{name}/positions_{dtype}",
                functools.partial(
                    lambda n, d: model(n)(ids, positions=positions.to(d)), name, dtype
                ),
                functools.partial(lambda n: model(n)(ids, positions=positions), name),
            )
            result(
                f"model/cache/{name}/positions_{dtype}",
                functools.partial(
                    lambda n, d: model(n)(
                        ids, positions=positions.to(d), cache=model(n).new_cache(2, 4)
                    ),
                    name,
                    dtype,
                ),
                functools.partial(lambda n: model(n)(ids, positions=positions), name),
                tol=1e-5,
            )
        raises(
            f"model/forward/{name}/positions_nan",
            functools.partial(lambda n: model(n)(ids, positions=torch.full((4,), math.nan)), name),
            TypeError if name in ("learned", "t5") else ValueError,
            "positions must be",
        )
    raises(
        "model/generate/empty_prompt",
        lambda: model().generate(ids[:, :0], 2),
        ValueError,
        "input_ids",
    )
    raises("model/forward/empty", lambda: model()(ids[:, :0]), ValueError, "input_ids")
    for temperature, exc in (
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-1.0, ValueError),
        ("hot", TypeError),
    ):
        raises(
            f"model/generate/temperature_{temperature}",
            lambda t=temperature: model().generate(ids, 2, temperature=t),
            exc,
            "temperature",
        )
    raises(
        "model/forward/cache_batch",
        lambda: model()(ids, cache=model().new_cache(BATCH + 1, 8)),
        ValueError,
        "cache",
    )
    for name in posenc.available():
        if posenc.registry.get(name).position_axes > 1:
            spec = {"name": name, "grid": (2, 3)}
            raises(f"model/init/{name}", functools.partial(lm, spec), ValueError, "encoding")
    raises("model/init/unknown", functools.partial(lm, "no-such"), ValueError, "no-such")
    raises("model/init/int", functools.partial(lm, 3), TypeError, "encoding must be")


HF = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "max_position_embeddings": 32,
}


def hf_cases() -> None:
    """rope_from_hf_config and extend_context."""
    yarn = {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}
    for label, change, exc, match in (
        ("heads_0", {"num_attention_heads": 0}, ValueError, "num_attention_heads"),
        ("heads_str", {"num_attention_heads": "4"}, TypeError, "num_attention_heads"),
        ("hidden_str", {"hidden_size": "64"}, TypeError, "hidden_size"),
        ("hidden_float", {"hidden_size": 64.0}, TypeError, "hidden_size"),
        ("head_dim_negative", {"head_dim": -16}, ValueError, "head_dim"),
        ("head_dim_huge", {"head_dim": 2**63}, ValueError, "head_dim"),
        (
            "max_positions_0",
            {**yarn, "max_position_embeddings": 0},
            ValueError,
            "max_position_embeddings",
        ),
        (
            "max_positions_0_dynamic",
            {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 0},
            ValueError,
            "max_position_embeddings",
        ),
        (
            "max_positions_str",
            {**yarn, "max_position_embeddings": "32"},
            TypeError,
            "max_position_embeddings",
        ),
        (
            "original_0",
            {**yarn, "original_max_position_embeddings": 0},
            ValueError,
            "original_max_position_embeddings",
        ),
        ("rope_theta_str", {"rope_theta": "1e4"}, TypeError, "rope_theta"),
        ("rope_theta_huge", {"rope_theta": 1e300}, ValueError, "rope_theta"),
        ("rope_theta_nan", {"rope_theta": math.nan}, ValueError, "rope_theta"),
        ("partial_huge", {"partial_rotary_factor": 1e39}, ValueError, "partial_rotary_factor"),
        (
            "factor_huge",
            {"rope_scaling": {"rope_type": "linear", "factor": 1e300}},
            ValueError,
            "factor",
        ),
        (
            "factor_ntk_huge",
            {"rope_scaling": {"rope_type": "dynamic", "factor": 1e300}},
            ValueError,
            "factor",
        ),
    ):
        raises(
            f"hf/rope_from_hf_config/{label}",
            functools.partial(rope_from_hf_config, {**HF, **change}),
            exc,
            match,
        )

    def stub(max_positions: Any = 32) -> SimpleNamespace:
        """A duck-typed causal LM: extend_context validates before it rebuilds anything."""
        rope = {"rope_type": "default"}
        config = {**HF, "rope_parameters": rope, "max_position_embeddings": max_positions}
        config = SimpleNamespace(**config)
        return SimpleNamespace(config=config, model=SimpleNamespace(rotary_emb=object()))

    for label, args, kwargs, match in (
        ("factor_huge", ("linear", 1e300), {}, "factor"),
        ("factor_ntk_huge", ("ntk", 1e300), {}, "factor"),
        ("factor_str", ("linear", "2"), {}, "factor"),
        ("method", ("longest", 2.0), {}, "method"),
        ("original_huge", ("yarn", 2.0, 2**40), {}, "original_max_position_embeddings"),
        ("original_0", ("yarn", 2.0, 0), {}, "original_max_position_embeddings"),
        ("beta_fast_huge", ("yarn", 2.0), {"beta_fast": 1e300}, "beta_fast"),
    ):
        raises(
            f"hf/extend_context/{label}",
            functools.partial(lambda a, k: extend_context(stub(), *a, **k), args, kwargs),
            ValueError,
            match,
        )
    raises(
        "hf/extend_context/max_positions_str",
        lambda: extend_context(stub("32"), "linear", 2.0),
        ValueError,
        "original_max_position_embeddings",
    )


def positions_cases() -> None:
    """positions.grid and positions.multimodal."""
    for label, args, kwargs, exc, match in (
        ("h_0", (0, 3), {}, ValueError, r"\bh must"),
        ("w_negative", (2, -1), {}, ValueError, r"\bw must"),
        ("h_float", (2.0, 3), {}, TypeError, r"\bh must"),
        ("h_bool", (True, 3), {}, TypeError, r"\bh must"),
        ("h_huge", (2**40, 3), {}, ValueError, r"\bh must"),
        ("prefix_negative", (2, 3, -1), {}, ValueError, "prefix must"),
        ("normalize_str", (2, 3), {"normalize": "no"}, TypeError, "normalize must"),
        ("normalize_int", (2, 3), {"normalize": 1}, TypeError, "normalize must"),
        ("normalize_none", (2, 3), {"normalize": None}, TypeError, "normalize must"),
    ):
        raises(
            f"positions.grid/{label}",
            functools.partial(lambda a, k: grid(*a, **k), args, kwargs),
            exc,
            match,
        )
    ids = torch.tensor([[5, 6] + [7] * 8 + [5]])  # text, a video of 2 frames of 2x2 tokens, text
    video = torch.tensor([[2, 4, 4]])
    common = {"image_token_id": 8, "video_token_id": 7}

    def mm(input_ids=ids, **kwargs):
        return multimodal(**{"input_ids": input_ids, "video_grid_thw": video, **common, **kwargs})

    for label, kwargs, exc, match in (
        (
            "time_overflow",
            {"second_per_grid_ts": [1e4], "tokens_per_second": 1e15},
            ValueError,
            "second_per_grid_ts",
        ),
        (
            "time_overflow_float32",
            {"second_per_grid_ts": torch.tensor([1e30]), "tokens_per_second": 1e15},
            ValueError,
            "second_per_grid_ts",
        ),
        (
            "time_overflow_exact",
            {"second_per_grid_ts": [1e4], "tokens_per_second": 1e15, "exact_time": True},
            ValueError,
            "second_per_grid_ts",
        ),
        ("tokens_per_second_huge", {"tokens_per_second": 1e300}, ValueError, "tokens_per_second"),
        (
            "seconds_nan",
            {"second_per_grid_ts": [math.nan], "tokens_per_second": 2.0},
            ValueError,
            "second_per_grid_ts",
        ),
        ("exact_time_str", {"exact_time": "yes"}, TypeError, "exact_time"),
        ("ids_float", {"input_ids": ids.float()}, TypeError, "input_ids"),
        ("ids_bool", {"input_ids": ids.bool()}, TypeError, "input_ids"),
        ("ids_rank", {"input_ids": ids[0]}, ValueError, "input_ids"),
        ("merge_0", {"spatial_merge_size": 0}, ValueError, "spatial_merge_size"),
        ("grid_float", {"video_grid_thw": video.float()}, TypeError, "video_grid_thw"),
        ("mask_2", {"attention_mask": torch.full_like(ids, 2)}, ValueError, "attention_mask"),
    ):
        raises(
            f"positions.multimodal/{label}",
            functools.partial(lambda k: mm(**k), kwargs),
            exc,
            match,
        )
    # each step fits, but 2 steps of the 3 frames of one video, or two videos, do not
    frames = torch.tensor([[5] + [7] * 12 + [5]])
    two = torch.tensor([[5] + [7] * 8 + [5] + [7] * 8 + [5]])
    for label, input_ids, thw, seconds, match in (
        ("frames_overflow", frames, [[3, 4, 4]], [5e15], "video temporal ids reach"),
        ("videos_overflow", two, [[2, 4, 4], [2, 4, 4]], [5e15, 5e15], "position ids reach"),
    ):
        raises(
            f"positions.multimodal/{label}",
            functools.partial(
                lambda i, t, s: multimodal(
                    i,
                    video_grid_thw=torch.tensor(t),
                    second_per_grid_ts=s,
                    tokens_per_second=1.0,
                    exact_time=True,
                    **common,
                ),
                input_ids,
                thw,
                seconds,
            ),
            ValueError,
            match,
        )
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32):
        result(
            f"positions.multimodal/ids_{dtype}",
            functools.partial(lambda d: mm(ids.to(d)), dtype),
            mm,
        )


def compose_cases() -> None:
    for label, call, exc, match in (
        ("nothing", lambda: posenc.compose(), ValueError, "at least one"),
        (
            "rotary",
            lambda: posenc.compose(posenc.create("rope", head_dim=8)),
            ValueError,
            "additive encodings only",
        ),
        (
            "dims",
            lambda: posenc.compose(
                posenc.create("sinusoidal", dim=8), posenc.create("learned", dim=4)
            ),
            ValueError,
            "one dim",
        ),
        ("no_dim", lambda: posenc.compose("sinusoidal"), ValueError, "dim="),
        ("dim_float", lambda: posenc.compose("sinusoidal", dim=8.0), TypeError, "dim must be"),
        ("dim_huge", lambda: posenc.compose("sinusoidal", dim=2**40), ValueError, "dim must be"),
        ("name_int", lambda: posenc.compose(3, dim=8), TypeError, "encoding must be"),
        ("unknown", lambda: posenc.compose("no-such", dim=8), ValueError, "no-such"),
        (
            "limit",
            lambda: make(COMPOSE).encode(torch.tensor([0, 2048])),
            ValueError,
            "max_positions=2048",
        ),
    ):
        raises(f"compose/{label}", call, exc, match)


def other_cases() -> None:
    """The registry's and the tables' own entry points."""
    for label, call, exc, match in (
        ("create/name_int", lambda: posenc.create(3), TypeError, "name must be a str"),
        ("create/unknown", lambda: posenc.create("no-such"), ValueError, "no-such"),
        ("info/name_int", lambda: posenc.info(3), TypeError, "name must be a str"),
        (
            "resize/huge",
            lambda: posenc.create("learned", dim=4).resize(2**40),
            ValueError,
            "new_max_positions",
        ),
        (
            "resize/str",
            lambda: posenc.create("learned", dim=4).resize("4096"),
            TypeError,
            "new_max_positions",
        ),
        ("resample/zero", lambda: make("learned_2d").resample((0, 3)), ValueError, "new_grid"),
        ("resample/huge", lambda: make("learned_2d").resample((2**40, 3)), ValueError, "new_grid"),
    ):
        raises(f"other/{label}", call, exc, match)


def wave_cases() -> None:
    """What the last wave added: KV caches and the model's check of a given cache, layer
    plans, the Hugging Face layer reader, the research encodings' sizes, zero-length
    rotations under length-dependent scaling, and seconds given as strings."""
    from posenc import KVCache
    from posenc.hf import layer_plan
    from posenc.models import LayerPlan
    from posenc.positions import tmrope

    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 10]])
    model = functools.cache(lm)
    for label, args, kwargs, exc, match in (
        ("n_layers_0", (0, 1, 1, 4, 8), {}, ValueError, "n_layers must be >= 1"),
        ("kv_heads_0", (1, 1, 0, 4, 8), {}, ValueError, "kv_heads must be >= 1"),
        ("head_dim_0", (1, 1, 1, 0, 8), {}, ValueError, "head_dim must be >= 1"),
        ("batch_negative", (1, -1, 1, 4, 8), {}, ValueError, "batch must be >= 1"),
        ("max_seq_len_negative", (1, 1, 1, 4, -1), {}, ValueError, "max_seq_len must be >= 1"),
        ("max_seq_len_float", (1, 1, 1, 4, 2.5), {}, TypeError, "max_seq_len must be an int"),
        ("dtype_int64", (1, 1, 1, 4, 8), {"dtype": torch.int64}, TypeError, "dtype must be"),
        ("dtype_none", (1, 1, 1, 4, 8), {"dtype": None}, TypeError, "dtype must be"),
        ("device_bogus", (1, 1, 1, 4, 8), {"device": "bogus"}, ValueError, "device must"),
    ):
        raises(
            f"cache/init/{label}",
            functools.partial(lambda a, k: KVCache(*a, **k), args, kwargs),
            exc,
            match,
        )
    for label, call, exc, match in (
        (
            "update_width",
            lambda c: c.update(0, gen(1, 1, 2, 3), gen(1, 1, 2, 3)),
            ValueError,
            r"k must be \[batch=1, kv_heads=1, n, 4\]",
        ),
        (
            "update_layer",
            lambda c: c.update(5, gen(1, 1, 2, 4), gen(1, 1, 2, 4)),
            ValueError,
            "layer must be <= 0",
        ),
        (
            "update_v_len",
            lambda c: c.update(0, gen(1, 1, 2, 4), gen(1, 1, 3, 4)),
            ValueError,
            "v must be",
        ),
        ("advance_negative", lambda c: c.advance(-1), ValueError, "n must be >= 0"),
        ("advance_float", lambda c: c.advance(1.5), TypeError, "n must be an int"),
    ):
        raises(
            f"cache/{label}",
            functools.partial(lambda f: f(KVCache(1, 1, 1, 4, 8)), call),
            exc,
            match,
        )
    for label, call, match in (
        ("generate_use_cache_str", lambda: model().generate(ids, 2, use_cache="no"), "use_cache"),
        ("init_causal_str", lambda: TransformerLM(11, 16, 1, 2, "rope", causal="no"), "causal"),
    ):
        raises(f"model/{label}", call, TypeError, f"{match} must be a bool")
    q = gen(BATCH, HEADS, SEQ, SIZE)
    raises(
        "attention/causal_str",
        lambda: posenc.attention(q, q, q, causal="no"),
        TypeError,
        "causal must be a bool",
    )
    raises(
        "hf/rope_interleave_str",
        lambda: rope_from_hf_config(
            {**HF, "model_type": "deepseek_v3", "qk_rope_head_dim": 8, "rope_interleave": "no"}
        ),
        TypeError,
        "rope_interleave must be a bool",
    )
    raises(
        "compose/module",
        lambda: posenc.compose(torch.nn.Linear(2, 2), dim=2),
        TypeError,
        r"encoding must be an Encoding.*encodings\[0\] is a Linear",
    )
    from posenc.positions import pose, randomized

    for sampler in (randomized, pose):
        for label, kwargs, exc, match in (
            ("generator_int", {"generator": 3}, TypeError, "generator must be a torch.Generator"),
            ("device_bogus", {"device": "bogus"}, ValueError, "device must name a torch device"),
        ):
            raises(
                f"positions/{sampler.__name__}_{label}",
                functools.partial(lambda s, k: s(2, 5, 100, **k), sampler, kwargs),
                exc,
                match,
            )
    for label, config in (("str", "llama"), ("none", None)):
        raises(
            f"hf/layer_plan/config_{label}",
            functools.partial(layer_plan, config),
            TypeError,
            "config must be a dict",
        )
    for label, args, kwargs, exc, match in (
        ("len_negative", (1, -1), {}, ValueError, "max_seq_len must be >= 1"),
        ("batch_negative", (-1, 8), {}, ValueError, "batch must be >= 1"),
        ("batch_float", (1.0, 8), {}, TypeError, "batch must be an int"),
        ("len_float", (1, 8.0), {}, TypeError, "max_seq_len must be an int"),
        ("rolling_str", (1, 8), {"rolling": "no"}, TypeError, "rolling must be a bool"),
        ("rolling_int", (1, 8), {"rolling": 0}, TypeError, "rolling must be a bool"),
    ):
        raises(
            f"cache/new_cache/{label}",
            functools.partial(lambda a, k: model().new_cache(*a, **k), args, kwargs),
            exc,
            match,
        )
    two_layers = functools.cache(
        lambda encoding="rope": TransformerLM(11, 16, 2, 2, encoding=encoding).eval()
    )
    windowed = functools.cache(
        lambda: TransformerLM(11, 16, 2, 2, plan=LayerPlan.local_global(2, (1, 1), window=3))
    )
    for label, net, cache, exc, match in (
        ("other_model", two_layers, lambda: model().new_cache(2, 8), ValueError, "n_layers=1"),
        ("head_dim", two_layers, lambda: KVCache(2, 2, 2, 4, 16), ValueError, "head_dim=8"),
        ("kv_heads", two_layers, lambda: KVCache(2, 2, 1, 8, 16), ValueError, "kv_heads=2"),
        (
            "pope_keys",
            lambda: two_layers("pope"),
            lambda: KVCache(2, 2, 2, 8, 16),
            ValueError,
            "key width 16",
        ),
        (
            "dtype",
            two_layers,
            lambda: KVCache(2, 2, 2, 8, 16, dtype=torch.float64),
            ValueError,
            "torch.float64",
        ),
        (
            "rolling_full_layer",
            windowed,
            lambda: KVCache(2, 2, 2, 8, 16, keep=[2, 2]),
            ValueError,
            "layer 1 keeps its last 2 keys",
        ),
        ("dict", two_layers, dict, TypeError, "cache must be a KVCache"),
    ):
        raises(
            f"cache/forward/{label}",
            functools.partial(lambda n, c: n()(ids, cache=c()), net, cache),
            exc,
            match,
        )
    result(
        "cache/forward/rolling_or_not",
        lambda: windowed()(ids, cache=windowed().new_cache(2, 8, rolling=False)),
        lambda: windowed()(ids),
        tol=1e-6,
    )
    raises(
        "model/plan/local_global_window_none",
        lambda: LayerPlan.local_global(4, window=None),
        TypeError,
        "window must be an int",
    )
    llama = {**HF, "num_hidden_layers": 2, "rope_theta": 1e4}
    for n in (0, 1, 3, 5):
        raises(
            f"hf/layer_plan/layer_types_{n}",
            functools.partial(
                lambda n: layer_plan({**llama, "layer_types": ["full_attention"] * n}), n
            ),
            ValueError,
            "layer_types must be a list of 2 layer types",
        )
    flat = {**llama, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    for label, config, layer_type, exc, match in (
        ("flat_bogus", flat, "bogus", ValueError, "layer_type must be one of"),
        ("flat_int", flat, 3, TypeError, "layer_type must be a str"),
        (
            "flat_undeclared",
            {**flat, "layer_types": ["full_attention"] * 2},
            "sliding_attention",
            ValueError,
            "the config's layer_types",
        ),
    ):
        raises(
            f"hf/layer_type/{label}",
            functools.partial(
                lambda c, t: rope_from_hf_config(c, layer_type=t), config, layer_type
            ),
            exc,
            match,
        )
    result(
        "hf/layer_type/flat_declared",
        lambda: rope_from_hf_config(flat, layer_type="full_attention").inv_freq(),
        lambda: rope_from_hf_config(flat).inv_freq(),
    )
    raises(
        "hf/text_config_str",
        lambda: rope_from_hf_config({**HF, "model_type": "qwen2_vl", "text_config": "x"}),
        TypeError,
        "text_config must be a dict .* or a config object",
    )
    for label, name, kwargs, match in (
        ("p_rope_head_dim_4", "p_rope", {"head_dim": 4}, r"p=0.75 of head_dim=4 .* 0.5, 1\b"),
        (
            "rope_odd_fraction",
            "rope",
            {"head_dim": 4, "partial_rotary_factor": 0.75},
            "partial_rotary_factor=0.75 of head_dim=4",
        ),
    ):
        raises(
            f"other/create/{label}",
            functools.partial(lambda n, k: posenc.create(n, **k), name, kwargs),
            ValueError,
            match,
        )
    q = gen(BATCH, HEADS, SEQ, 6, seed=5)  # head_dim 6 against the encodings' 8
    for name in ("cope", "shaw"):
        raises(
            f"attention/{name}_head_dim",
            functools.partial(
                lambda n: posenc.attention(q, q, q, posenc.create(n, n_heads=HEADS, head_dim=8)),
                name,
            ),
            ValueError,
            "q has head_dim=6 but the encoding",
        )
    empty = gen(BATCH, HEADS, 0, SIZE)
    for rope_type, scaling in (
        ("dynamic", {"rope_type": "dynamic", "factor": 2.0}),
        (
            "longrope",
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4,
                "factor": 4.0,
            },
        ),
    ):
        rope = posenc.create(
            "rope", head_dim=SIZE, scaling={**scaling, "original_max_position_embeddings": 16}
        )
        result(
            f"positions/empty_{rope_type}",
            functools.partial(rope, empty, empty),
            lambda: (empty, empty),
        )
    video = torch.tensor([[2, 4, 4]])
    mm_ids = torch.tensor([[5, 6] + [7] * 8 + [5]])
    omni = dict(
        image_token_id=90,
        video_token_id=91,
        audio_token_id=92,
        vision_start_token_id=93,
        audio_start_token_id=95,
    )
    for label, seconds in (("str", "0.5"), ("list_of_str", ["0.5"])):
        raises(
            f"positions.multimodal/seconds_{label}",
            functools.partial(
                lambda s: multimodal(
                    mm_ids,
                    video_grid_thw=video,
                    second_per_grid_ts=s,
                    tokens_per_second=2.0,
                    image_token_id=8,
                    video_token_id=7,
                ),
                seconds,
            ),
            TypeError,
            "second_per_grid_ts must be real numbers",
        )
        raises(
            f"positions.tmrope/seconds_{label}",
            functools.partial(
                lambda s: tmrope(
                    torch.tensor([[93] + [91] * 8 + [94]]),
                    video_grid_thw=video,
                    second_per_grids=s,
                    **omni,
                ),
                seconds,
            ),
            TypeError,
            "second_per_grids must be real numbers",
        )


positions_dtype_cases()
positions_value_cases()
input_cases()
config_cases()
attention_cases()
model_cases()
hf_cases()
positions_cases()
compose_cases()
other_cases()
wave_cases()


# The tests -----------------------------------------------------------------------------


def _assert_same(got: Any, expected: Any, tol: float) -> None:
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _assert_same(g, e, tol)
        return
    assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
    assert got.shape == expected.shape and got.device == expected.device
    if got.device.type == "meta":
        assert got.dtype == expected.dtype
        return
    if got.is_floating_point():
        assert torch.isfinite(got).all() or not torch.isfinite(expected).all(), "NaN or inf"
        # a float64 result of float64 positions against the float32 one of int64 positions
        assert_close(got.double(), expected.double(), rtol=tol, atol=tol)
    else:
        assert torch.equal(got, expected)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case) -> None:
    if case.raises is None:
        _assert_same(case.call(), case.expected(), case.tol)
        return
    with pytest.raises(case.raises, match=case.match) as info:
        case.call()
    # raised by posenc itself, not from inside torch (or Python) on posenc's behalf
    origin = Path(info.traceback[-1].path)
    assert SRC in origin.parents, f"raised in {origin}: {info.value!r}"


def matrix_size() -> str:
    """The matrix's size as the module docstring records it."""
    outcomes = Counter(case.outcome for case in CASES)
    families = Counter(case.id.split("/")[0] for case in CASES)
    by_family = ", ".join(f"{family} {n}" for family, n in families.items())
    return (
        f"{len(CASES)} cases: {outcomes['ValueError']} expect a ValueError, "
        f"{outcomes['TypeError']} a TypeError, {outcomes['result']} a correct result. By "
        f"family: {by_family}."
    )


def test_matrix_size_is_recorded() -> None:
    assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"
    recorded = " ".join(__doc__.split())  # the docstring, its line breaks undone
    assert matrix_size() in recorded, f"update the module docstring: {matrix_size()}"
