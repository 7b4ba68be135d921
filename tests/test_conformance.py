"""Conformance suite: every registered encoding through the same checks.

The tests are parametrized over :func:`posenc.available`, so an encoding is covered the moment
it registers. A small per-kind driver (:func:`make_inputs` and :class:`Driver`) builds the
inputs of a kind and calls the encoding the way that kind is called, so each check is written
once:

- additive: inputs ``(x,)``, x ``[batch, seq, dim]``; ``enc(x, positions=positions)``.
- none: inputs ``(x,)``; ``enc(x)``, which returns ``x``.
- rotary: inputs ``(q, k)``, ``[batch, heads, seq, head_dim]``;
  ``enc(q, k, positions=positions)`` returns ``(q2, k2)``.
- bias: no floating inputs; ``enc.bias(positions, positions)`` returns
  ``[n_heads, seq, seq]``. A bias that depends on the queries (``needs_q``, Shaw) gets a
  fixed ``q`` ``[batch, n_heads, seq, head_dim]`` and returns ``[batch, n_heads, seq, seq]``.
  One whose weights are not a softmax (stick-breaking, a ``ScoreWeights``) has no bias: its
  ``weights(positions, positions, q=, k=)``, ``[batch, n_heads, seq, seq]``, take its place.

An encoding that needs configuration keys besides its size key gets them in ``EXTRA_CONFIG``.
Encodings of image grids (``position_axes == 2``) get the same positions as coordinates on a
grid ``GRID_W`` wide, ``(p // GRID_W, p % GRID_W)`` (:func:`as_positions`), and ``rope_3d``
(``position_axes == 3``) as ``(t, h, w)`` on a video grid ``GRID3``, so every check runs on
them unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import posenc
from posenc.base import InputBias, InputTransforms, ScoreBias, ScoreWeights
from posenc.models import TransformerLM

NAMES = posenc.available()
KINDS = ("additive", "rotary", "bias", "none")
#: configuration keys, besides the size key, that an encoding needs to be built
SIZE = 8  # the size key's value: dim (additive), head_dim (rotary) or n_heads (bias)
BATCH, HEADS, SEQ = 2, 2, 6
#: positions far from 0: angles or tables computed in a low precision come out visibly wrong
OFFSET = 100
#: the width of the grid that grid encodings read the positions on; SEQ tokens fill its
#: default grid, and the OFFSET positions reach row (OFFSET + SEQ) // GRID_W
GRID_W = 3
GRID = (SEQ // GRID_W, GRID_W)
#: the video grid (frames, height, width) of ``rope_3d``: SEQ tokens, GRID_W wide, 2 high
GRID3 = (SEQ // (2 * GRID_W), 2, GRID_W)
EXTRA_CONFIG: dict[str, dict[str, Any]] = {
    "shaw": {"head_dim": 4},
    "fox": {"dim": 5},
    "path": {"dim": 5, "head_dim": 4},
    "pope": {"n_heads": HEADS},
    # its vectors start at zero (the paper's): drawn, so that every check sees the bias
    "cope": {"head_dim": 4, "init_std": 1.0},
    "sincos_2d": {"grid": GRID},
    "rope_2d": {"grid": GRID},
    "rope_3d": {"grid": GRID3},
    "rope_mixed": {"grid": GRID, "n_heads": HEADS},
    # a table must hold the far positions too, so its default grid is not the SEQ tokens'
    "learned_2d": {"grid": ((OFFSET + SEQ) // GRID_W + 1, GRID_W)},
}

by_name = pytest.mark.parametrize("name", NAMES)


def make(name: str, **kwargs: Any) -> posenc.Encoding:
    """``posenc.create(name)`` with the size key set to ``SIZE`` and any ``EXTRA_CONFIG``."""
    key = posenc.registry.get(name).size_key
    config: dict[str, Any] = {} if key is None else {key: SIZE}
    config.update(EXTRA_CONFIG.get(name, {}))
    config.update(kwargs)
    return posenc.create(name, **config)


def arange_positions(offset: int = 0, device: str = "cpu") -> torch.Tensor:
    return torch.arange(offset, offset + SEQ, device=device)


def as_positions(enc: posenc.Encoding, positions: torch.Tensor | None) -> torch.Tensor | None:
    """The positions as ``enc`` takes them: unchanged, or grid coordinates ``[..., 2]``."""
    if positions is None or enc.position_axes == 1:
        return positions
    if positions.dtype == torch.bool:
        return torch.stack((positions,) * enc.position_axes, dim=-1)
    if enc.position_axes == 3:  # (t, h, w) on the GRID3 video grid
        frame, rows = positions // (2 * GRID_W), (positions // GRID_W) % 2
        return torch.stack((frame, rows, positions % GRID_W), dim=-1)
    return torch.stack((positions // GRID_W, positions % GRID_W), dim=-1)


def make_inputs(
    kind: str, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    """The floating-point inputs of a kind's call (what its outputs are differentiated by)."""
    if kind in ("additive", "none"):
        return (torch.randn(BATCH, SEQ, SIZE, dtype=dtype, device=device),)
    if kind == "rotary":
        shape = (BATCH, HEADS, SEQ, SIZE)  # [b, h, s, head_dim]
        return (
            torch.randn(shape, dtype=dtype, device=device),
            torch.randn(shape, dtype=dtype, device=device),
        )
    if kind == "bias":
        return ()
    raise AssertionError(f"unknown kind {kind!r}")


def expected_shapes(
    enc: posenc.Encoding, inputs: tuple[torch.Tensor, ...]
) -> list[tuple[int, ...]]:
    if enc.kind == "bias":
        batched = enc.needs_q or isinstance(enc, InputBias)
        return [(BATCH, SIZE, SEQ, SEQ) if batched else (SIZE, SEQ, SEQ)]
    if enc.kind == "rotary":  # PoPE widens q and k
        return [(*t.shape[:-1], t.shape[-1] * enc.width_factor) for t in inputs]
    return [tuple(t.shape) for t in inputs]


def fixed_q(enc: posenc.Encoding, device: str = "cpu") -> dict[str, torch.Tensor]:
    """``{"q": ...}`` for a bias that depends on the queries, ``{"x": ...}`` for one that
    reads the layer's input (the same tensor every call), else {}."""
    if enc.kind != "bias" or not (enc.needs_q or isinstance(enc, InputBias)):
        return {}
    generator = torch.Generator().manual_seed(0)
    if isinstance(enc, InputBias):
        return {"x": torch.randn(BATCH, SEQ, enc.config.dim, generator=generator).to(device)}
    if isinstance(enc, InputTransforms):  # PaTH: the queries, the keys and the layer input
        shape = (BATCH, SIZE, SEQ, enc.config.head_dim)
        q, k = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
        x = torch.randn(BATCH, SEQ, enc.config.dim, generator=generator)
        return {"q": q.to(device), "k": k.to(device), "x": x.to(device)}
    head_dim = getattr(enc.config, "head_dim", SIZE)  # stick-breaking takes any
    q = torch.randn(BATCH, SIZE, SEQ, head_dim, generator=generator)
    if isinstance(enc, ScoreBias | ScoreWeights):  # CoPE, stick-breaking: scores of q and k
        k = torch.randn(BATCH, SIZE, SEQ, head_dim, generator=generator)
        return {"q": q.to(device), "k": k.to(device)}
    return {"q": q.to(device)}


def observed(enc: posenc.Encoding):
    """What a bias encoding puts on the scores (``bias``), or a stick-breaking one's weights
    (``weights``: it has no bias)."""
    return enc.weights if isinstance(enc, ScoreWeights) else enc.bias


class Driver(nn.Module):
    """Calls an encoding the way its kind is called and returns a tuple of output tensors."""

    def __init__(self, enc: posenc.Encoding, device: str = "cpu") -> None:
        super().__init__()
        self.enc = enc
        self.device = device  # of the default positions of a bias
        self.q = fixed_q(enc, device)  # for a bias that depends on the queries

    def forward(
        self, *inputs: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        kind = self.enc.kind
        grids = (GRID, GRID3)
        if positions is None and self.enc.position_axes != 1 and self.enc.config.grid not in grids:
            positions = arange_positions(device=self.device)  # its default grid is larger
        positions = as_positions(self.enc, positions)
        if kind == "additive":
            return (self.enc(*inputs, positions=positions),)
        if kind == "none":
            return (self.enc(*inputs),)
        if kind == "rotary":
            return tuple(self.enc(*inputs, positions=positions))
        if kind == "bias":
            if positions is None:
                positions = torch.arange(SEQ, device=self.device)
            return (observed(self.enc)(positions, positions, **self.q),)
        raise AssertionError(f"unknown kind {kind!r}")


def assert_all_close(got, expected, **tol: float) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e, **tol)


def has_params(enc: nn.Module) -> bool:
    return any(True for _ in enc.parameters())


def rounding(tol) -> dict[str, float]:
    """Tolerance of the same math run on tensors of other shapes (batched or not, default or
    given positions, compiled), where vectorised kernels (sin, matmul) round otherwise, or
    in float32 against float64: every output is a sum of at most SIZE terms (time2vec's
    projection, a rotation), each at most about the largest position, OFFSET + SEQ, in size
    (an angle, or time2vec's ω·τ with |ω| ~ 1 times weights below 1)."""
    return tol(n=SIZE, scale=OFFSET + SEQ)


# 1. shapes and info ------------------------------------------------------------------------


@by_name
def test_info_matches_module(name):
    enc = make(name)
    info = posenc.info(name)
    assert info.name == name
    assert info.kind == enc.kind
    assert info.kind in KINDS
    assert type(enc).size_key == {"additive": "dim", "rotary": "head_dim", "bias": "n_heads"}.get(
        info.kind
    )
    for field in ("reference", "summary"):
        value = getattr(info, field)
        assert isinstance(value, str) and value.strip(), f"{field} is empty"
    for field in ("trainable", "relative", "extrapolates"):
        assert isinstance(getattr(info, field), bool), f"{field} is not a bool"
    assert info.trainable == has_params(enc)


@by_name
def test_config_extends_its_kinds_config(name):
    """Every kind's config holds its size key first (``dim``, ``head_dim``, ``n_heads``), so
    the kind base reads the size, typed, from any encoding's config."""
    cls = posenc.registry.get(name)
    kind_config = {
        "additive": posenc.base.AdditiveConfig,
        "rotary": posenc.base.RotaryConfig,
        "bias": posenc.base.BiasConfig,
    }.get(cls.kind)
    if kind_config is None:
        assert cls.size_key is None
        return
    assert issubclass(cls.Config, kind_config)
    assert cls.Config.accepted_keys()[0] == cls.size_key
    assert getattr(make(name), cls.size_key) == SIZE


@by_name
def test_output_shapes(name, tol):
    enc = make(name)
    drive = Driver(enc)
    inputs = make_inputs(enc.kind)
    for positions in (None, arange_positions(), arange_positions(OFFSET)):
        outs = drive(*inputs, positions=positions)
        assert [tuple(o.shape) for o in outs] == expected_shapes(enc, inputs)
        assert all(o.dtype == torch.float32 for o in outs)
    # the default positions are arange(seq) (which may come from a cached table)
    assert_all_close(drive(*inputs), drive(*inputs, positions=arange_positions()), **rounding(tol))
    if enc.kind == "none":
        assert_close(drive(*inputs)[0], inputs[0], rtol=0, atol=0)  # x itself
    if enc.kind == "additive":
        (x,) = inputs
        positions = arange_positions(OFFSET)
        pe = enc.encode(as_positions(enc, positions))
        assert pe.shape == (SEQ, SIZE) and pe.dtype == torch.float32
        # the call is x + encode(positions): the same operations on the same shapes
        assert_close(drive(x, positions=positions)[0], x + pe, rtol=0, atol=0)
        batched = torch.stack((positions, arange_positions()))  # [2, seq]
        pe2 = enc.encode(as_positions(enc, batched))
        assert pe2.shape == (2, SEQ, SIZE) and pe2.dtype == torch.float32
        pe_start = enc.encode(as_positions(enc, arange_positions()))
        assert_close(pe2, torch.stack((pe, pe_start)), **rounding(tol))


@by_name
def test_batched_positions(name, tol):
    """``[batch, seq]`` positions: row b gives what ``[seq]`` positions give batch element b."""
    enc = make(name)
    if enc.kind in ("none", "bias"):
        pytest.skip(f"a {enc.kind!r} encoding has no per-batch positions in its call")
    drive = Driver(enc)
    inputs = make_inputs(enc.kind)
    positions = torch.stack((arange_positions(), arange_positions(OFFSET)))  # [batch, seq]
    outs = drive(*inputs, positions=positions)
    for b in range(BATCH):
        row = drive(*(t[b : b + 1] for t in inputs), positions=positions[b])
        assert_all_close([o[b : b + 1] for o in outs], row, **rounding(tol))


# 2. dtypes ---------------------------------------------------------------------------------


@by_name
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dtype_is_float32_math_rounded_once(name, dtype):
    enc = make(name)
    if enc.kind == "bias":
        pytest.skip("bias() takes only positions: there is no input dtype to follow")
    drive = Driver(enc)
    inputs = tuple(t.to(dtype) for t in make_inputs(enc.kind))
    positions = arange_positions(OFFSET)
    outs = drive(*inputs, positions=positions)
    reference = drive(*(t.float() for t in inputs), positions=positions)
    assert all(o.dtype == dtype for o in outs)
    # The contract (DESIGN.md): the math runs in float32 and is rounded once to the input
    # dtype, so the low-precision result is the float32 one rounded, bit for bit. A tolerance
    # of one eps would let a second rounding (adding or rotating in the input dtype) through.
    assert_all_close(outs, [r.to(dtype) for r in reference], rtol=0, atol=0)


@by_name
def test_float64_input_computes_in_float64(name, tol):
    enc = make(name)
    if enc.kind == "bias":
        pytest.skip("bias() takes only positions: there is no input dtype to follow")
    drive = Driver(enc)
    inputs = make_inputs(enc.kind, torch.float64)
    positions = arange_positions(OFFSET)
    outs = drive(*inputs, positions=positions)
    assert all(o.dtype == torch.float64 for o in outs)
    outs32 = drive(*(t.float() for t in inputs), positions=positions)
    assert_all_close(outs, [o.double() for o in outs32], **rounding(tol))
    if enc.kind == "additive":
        # x + the float64 encoding (a float32 one would be off by ~1e-6 at these positions)
        pe64 = enc.encode(as_positions(enc, positions), dtype=torch.float64)
        assert pe64.dtype == torch.float64
        assert_close(outs[0], inputs[0] + pe64)
        if not enc.integer_positions:  # integer positions are cast to float64 first
            assert_close(enc.encode(as_positions(enc, positions.double())), pe64, rtol=0, atol=0)


# 3. gradients ------------------------------------------------------------------------------


@by_name
def test_gradcheck_inputs_and_parameters(name):
    enc = make(name)
    drive = Driver(enc)
    inputs = tuple(t.requires_grad_() for t in make_inputs(enc.kind, torch.float64))
    params = {
        f"enc.{n}": p.detach().double().requires_grad_()
        for n, p in enc.named_parameters()
        if p.requires_grad
    }
    if not inputs and not params:
        pytest.skip("no floating-point inputs and no trainable parameters to differentiate")
    names = list(params)
    positions = arange_positions(3)

    def fn(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tensors, values = args[: len(inputs)], args[len(inputs) :]
        return torch.func.functional_call(
            drive, dict(zip(names, values, strict=True)), tensors, {"positions": positions}
        )

    args = (*inputs, *params.values())
    # the full Jacobian for small encodings; random projections of it for big tables
    fast = sum(t.numel() for t in args) > 4096
    assert torch.autograd.gradcheck(fn, args, fast_mode=fast)


@by_name
def test_every_parameter_gets_a_finite_gradient(name):
    enc = make(name)
    params = {n: p for n, p in enc.named_parameters() if p.requires_grad}
    if not params:
        pytest.skip("no trainable parameters")
    outs = Driver(enc)(*make_inputs(enc.kind), positions=arange_positions(3))
    loss = sum((o * torch.randn_like(o)).sum() for o in outs)
    loss.backward()
    for n, p in params.items():
        assert p.grad is not None, f"{n} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{n} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{n} has an all-zero gradient"


# 4. torch.compile --------------------------------------------------------------------------


@by_name
def test_compile_fullgraph_matches_eager(name, tol):
    enc = make(name)
    drive = Driver(enc)
    inputs = make_inputs(enc.kind)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(drive, backend="aot_eager", fullgraph=True)
        for positions in (None, arange_positions(OFFSET)):
            assert_all_close(
                compiled(*inputs, positions=positions),
                drive(*inputs, positions=positions),
                **rounding(tol),  # aot_eager may decompose ops
            )
    finally:
        torch._dynamo.reset()


# 5. state_dict -----------------------------------------------------------------------------


@by_name
def test_state_dict_round_trip(name):
    enc = make(name)
    state = enc.state_dict()
    # parameters only: derived tables are non-persistent buffers
    assert set(state) == {n for n, _ in enc.named_parameters()}
    if not posenc.info(name).trainable:
        assert state == {}
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(torch.randn_like(p))
    inputs = make_inputs(enc.kind)
    positions = arange_positions(3)
    expected = Driver(enc)(*inputs, positions=positions)
    fresh = make(name)
    if has_params(enc):  # the perturbation shows, so a load that did nothing would fail below
        before = Driver(fresh)(*inputs, positions=positions)
        assert any(not torch.equal(b, e) for b, e in zip(before, expected, strict=True))
    fresh.load_state_dict(enc.state_dict())
    # the same parameters through the same code
    assert_all_close(Driver(fresh)(*inputs, positions=positions), expected, rtol=0, atol=0)


# 6. meta device ----------------------------------------------------------------------------


@by_name
def test_meta_device(name):
    enc = make(name, device="meta")
    for n, t in [*enc.named_parameters(), *enc.named_buffers()]:
        assert t.device.type == "meta", f"{n} is on {t.device}"
    inputs = make_inputs(enc.kind, device="meta")
    for positions in (None, arange_positions(device="meta")):
        outs = Driver(enc, device="meta")(*inputs, positions=positions)
        assert [tuple(o.shape) for o in outs] == expected_shapes(enc, inputs)
        assert all(o.device.type == "meta" for o in outs)

    enc.to_empty(device="cpu")
    with torch.no_grad():  # to_empty leaves garbage; NaN makes a missed initialisation show
        for t in [*enc.parameters(), *enc.buffers()]:
            if t.is_floating_point():
                t.fill_(float("nan"))
    if hasattr(enc, "reset_parameters"):
        enc.reset_parameters()
    for n, t in [*enc.named_parameters(), *enc.named_buffers()]:
        assert t.device.type == "cpu", f"{n} is on {t.device}"
        assert torch.isfinite(t).all(), f"{n} is not finite after reset_parameters()"
    # given the same parameters, the materialised module is a freshly built one (buffers too,
    # computed by the same code): exactly
    reference = make(name)
    enc.load_state_dict(reference.state_dict())
    inputs = make_inputs(enc.kind)
    positions = arange_positions(OFFSET)
    assert_all_close(
        Driver(enc)(*inputs, positions=positions),
        Driver(reference)(*inputs, positions=positions),
        rtol=0,
        atol=0,
    )


# 7. model.to(bfloat16) ---------------------------------------------------------------------


@by_name
def test_to_bfloat16_keeps_float32_encoding(name):
    enc = make(name)
    if has_params(enc):
        pytest.skip("has trainable parameters, which .to(bfloat16) casts by design")
    drive = Driver(enc)
    inputs = make_inputs(enc.kind)
    positions = arange_positions(OFFSET)
    before = drive(*inputs, positions=positions)
    pe = enc.encode(as_positions(enc, positions)) if enc.kind == "additive" else None
    enc.to(torch.bfloat16)  # the float32 tables stay as they were: the same operations
    assert_all_close(drive(*inputs, positions=positions), before, rtol=0, atol=0)
    if pe is not None:
        after = enc.encode(as_positions(enc, positions))
        assert after.dtype == torch.float32
        assert_close(after, pe, rtol=0, atol=0)


# 8. bad inputs -----------------------------------------------------------------------------

LAYOUTS = {"additive": r"\[batch, seq, dim\]", "rotary": r"\[batch, heads, seq, head_dim\]"}


def bad_calls(enc: posenc.Encoding, case: str) -> list[tuple[Any, type[Exception], str]]:
    """``(thunk, exception type, message pattern)`` for one kind of bad input, or []."""
    kind = enc.kind
    good = make_inputs(kind)
    positions = as_positions(enc, arange_positions())
    wrong_positions = {
        "negative_positions": (positions - 1, ValueError, r"must be >= 0, got -1"),
        "positions_length": (
            as_positions(enc, torch.arange(SEQ + 1)),
            ValueError,
            rf"{SEQ + 1} positions.*sequence has {SEQ}",
        ),
        "bool_positions": (
            as_positions(enc, torch.ones(SEQ, dtype=torch.bool)),
            TypeError,
            r"torch\.bool",
        ),
    }
    if not enc.nonnegative_positions:  # grid coordinates: negative ones are valid
        del wrong_positions["negative_positions"]
    if kind in ("additive", "rotary"):
        shape = tuple(good[0].shape)
        wide = (*shape[:-1], SIZE + 2)
        wrong_x = {
            "rank": (torch.randn(*shape[:-2], SIZE), ValueError, LAYOUTS[kind]),
            "last_dim": (
                torch.randn(wide),
                ValueError,
                rf"{enc.size_key}={SIZE}.*{re.escape(str(wide))}",
            ),
            "int_dtype": (torch.ones(shape, dtype=torch.long), TypeError, r"floating-point"),
        }
        if case in wrong_x:
            x, exc, match = wrong_x[case]
            if kind == "additive":
                return [(lambda: enc(x), exc, match)]
            return [(lambda: enc(x, good[1]), exc, match), (lambda: enc(good[0], x), exc, match)]
        if case not in wrong_positions:
            return []
        pos, exc, match = wrong_positions[case]
        calls = [(lambda: enc(*good, positions=pos), exc, match)]
        if kind == "additive" and case != "positions_length":
            calls.append((lambda: enc.encode(pos), exc, match))
        return calls
    if kind == "bias" and case in ("negative_positions", "bool_positions"):
        pos, exc, match = wrong_positions[case]
        q = fixed_q(enc)
        return [
            (lambda: observed(enc)(pos, positions, **q), exc, match),
            (lambda: observed(enc)(positions, pos, **q), exc, match),
        ]
    return []


@by_name
@pytest.mark.parametrize(
    "case",
    ["rank", "last_dim", "int_dtype", "negative_positions", "positions_length", "bool_positions"],
)
def test_bad_inputs_raise(name, case):
    enc = make(name)
    calls = bad_calls(enc, case)
    if not calls:
        pytest.skip(f"{case!r} does not apply to the call of a {enc.kind!r} encoding")
    for call, exc, match in calls:
        with pytest.raises(exc, match=match):
            call()


@by_name
def test_position_limit(name):
    enc = make(name)
    limit = enc.position_limit() if hasattr(enc, "position_limit") else None
    if limit is None:
        pytest.skip("no position limit")
    drive = Driver(enc)
    inputs = make_inputs(enc.kind)
    last_ok = torch.arange(limit - SEQ, limit)
    assert all(torch.isfinite(o).all() for o in drive(*inputs, positions=last_ok))
    match = rf"position {limit}\b.*{enc.limit_name}={limit}\b"
    calls = [lambda: drive(*inputs, positions=last_ok + 1)]
    if enc.kind == "additive":
        calls.append(lambda: enc.encode(torch.tensor([0, limit, 1])))
        calls.append(lambda: enc(torch.randn(1, limit + 1, SIZE)))  # default positions
    for call in calls:
        with pytest.raises(posenc.PositionOutOfRangeError, match=match) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert info.value.position == limit and info.value.limit == limit


@by_name
def test_unknown_config_key(name):
    with pytest.raises(ValueError, match=r"no_such_key.*accepted keys"):
        make(name, no_such_key=1)


def test_unknown_encoding_lists_available():
    with pytest.raises(ValueError, match="no-such-encoding") as info:
        posenc.create("no-such-encoding")
    for name in NAMES:
        assert repr(name) in str(info.value)


# 9. TransformerLM end to end ---------------------------------------------------------------


@by_name
def test_module_apply_visits_every_module(name):
    """``nn.Module.apply(fn)``, PyTorch's usual way to initialise weights, reaches the encoding
    and every module inside it, alone and inside a model: no encoding shadows ``apply``
    (rotary encodings rotate with ``rotate()``)."""
    enc = make(name)
    visited: list[nn.Module] = []
    assert enc.apply(visited.append) is enc
    assert sorted(map(id, visited)) == sorted(map(id, enc.modules()))
    if enc.position_axes != 1:
        return  # an image-grid encoding has no place in a causal language model
    model = TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding=name)
    visited.clear()
    assert model.apply(visited.append) is model
    assert sorted(map(id, visited)) == sorted(map(id, model.modules()))
    assert any(isinstance(m, posenc.Encoding) for m in visited)


@by_name
@pytest.mark.parametrize("n_kv_heads", [None, 2], ids=["mha", "gqa"])
def test_transformer_lm_cached_generation(name, n_kv_heads, model_tol):
    if posenc.registry.get(name).position_axes != 1:
        pytest.skip("an image-grid encoding has no place in a causal language model")
    model = TransformerLM(
        vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding=name, n_kv_heads=n_kv_heads
    ).eval()
    ids = torch.randint(0, 37, (2, 5))
    cached = model.generate(ids, 8, use_cache=True)
    recomputed = model.generate(ids, 8, use_cache=False)
    assert cached.shape == (2, 13)
    assert torch.equal(cached[:, :5], ids)
    assert torch.equal(cached, recomputed)  # tokens: equal unless two logits (nearly) tie
    # the logits of each cached step equal those of one forward over the whole sequence
    with torch.no_grad():
        full = model(cached)
        cache = model.new_cache(2, 13)
        steps = [model(cached[:, :5], cache=cache)]
        steps += [model(cached[:, i : i + 1], cache=cache) for i in range(5, 13)]
    assert_close(torch.cat(steps, dim=1), full, **model_tol(model, 13, full))
