"""Attention patterns (``window=``, ``chunk=``), sinks and the soft cap against a naive float64
attention written here from their definitions, with every encoding kind, explicit positions,
packed documents, padding and the KV-cache layout; rows that see nothing, NaN in hidden
slots, gradients and bad input.

The reference (:func:`reference`) is the spec in a few lines: scores ``q kᵀ·scale + bias``,
the soft cap ``c·tanh(s / c)``, the mask from positions (causal ``j <= i``; window
``i - W < j <= i``, or ``|i - j| <= W // 2`` not causal; chunk ``i // C == j // C``), the
padding and the documents, a softmax over the keys plus the head's sink logit (which carries
no value), zero rows where nothing is visible.

The forward cases (:data:`CASES`) are not the full product of the five axes (encoding,
extras, pattern, sinks, softcap): every pair of values of two axes is in at least one case
(:func:`test_cases_cover_every_pair`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.runners.flex import flex_available
from posenc.positions import from_padding, from_segments

EPS = torch.finfo(torch.float32).eps
BATCH, HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 16
SCALE = HEAD_DIM**-0.5
WINDOW, BIDIRECTIONAL_WINDOW, CHUNK = 4, 5, 4  # the bidirectional one sees |i - j| <= 2
FLEX = flex_available(torch.device("cpu"))
#: one sink logit per query head, spread so that some heads give the sink most weight
SINKS = torch.tensor([-1.0, 0.5, 1.5, 3.0])

ENCODINGS = ["none", "rope", "alibi", "t5", "fire", "kerple"]
EXTRAS = ["default", "gaps", "packed", "padding", "cache"]
PATTERNS = ["window", "bidirectional", "chunk"]
SOFTCAPS = [None, 30.0, 2.0]  # 2.0 bites: unit-variance scores reach ±4


def make_encoding(name):
    """Each encoding with parameters away from their initial values (as tests/attn/
    test_backends.py does), so that a wrong bias shows."""
    if name == "none":
        return None
    if name == "rope":
        return posenc.create("rope", head_dim=HEAD_DIM)
    if name == "alibi":
        return posenc.create("alibi", n_heads=HEADS)
    if name == "t5":
        enc = posenc.create("t5", n_heads=HEADS, num_buckets=8, max_distance=6)
        torch.nn.init.normal_(enc.weight)
        return enc
    if name == "fire":
        enc = posenc.create("fire", n_heads=HEADS, hidden=32, init_threshold=8.0)
        with torch.no_grad():
            enc.c.fill_(0.7)
            enc.threshold_scale.fill_(1.25)
        return enc
    if name == "kerple":
        enc = posenc.create("kerple", n_heads=HEADS)
        with torch.no_grad():
            for p in enc.parameters():
                p.uniform_(0.1, 1.9)
        return enc
    raise AssertionError(name)


def bias_err(enc, bias):
    """An absolute bound on how far another float32 evaluation of the bias (flex's per
    score, another batch shape) is from ``bias``, beyond the rounding relative to ``|bias|``
    that :func:`bound` counts (as tests/attn/test_backends.py bounds them): FIRE's MLP sums
    ``hidden + 8`` terms up to ``Σ|w2|·(|w1|·4 + |b1|) + |b2|``; KERPLE's ``log(1 + r2·d)``
    rounds its 1 at ``eps·r1``."""
    size = bias.abs().max().item()
    name = enc.info.name if enc is not None else "none"
    if name == "fire":
        first, second = enc.mlp[0], enc.mlp[2]
        hidden = first.weight[:, 0].abs() * 4.0 + first.bias.abs()
        terms = (second.weight.abs() @ hidden + second.bias.abs()).max().item()
        return 2 * (enc.config.hidden + 8) * EPS * (terms + size)
    if name == "kerple":
        return 2 * 4 * EPS * (2 * size + enc.r1.abs().max().item())
    return 0.0


@dataclass(frozen=True)
class Case:
    encoding: str
    extras: str
    pattern: str
    sinks: bool
    softcap: float | None

    @property
    def id(self) -> str:
        cap = "" if self.softcap is None else f"-cap{self.softcap:g}"
        return f"{self.encoding}-{self.extras}-{self.pattern}{'-sinks' if self.sinks else ''}{cap}"


#: every pair of values of two axes in at least one case (a greedy covering array)
CASES = [
    Case("none", "default", "bidirectional", True, None),
    Case("none", "gaps", "window", False, 2.0),
    Case("none", "packed", "window", True, 2.0),
    Case("none", "padding", "chunk", False, None),
    Case("none", "cache", "window", True, 30.0),
    Case("rope", "default", "chunk", True, 30.0),
    Case("rope", "gaps", "chunk", True, 2.0),
    Case("rope", "packed", "bidirectional", False, 2.0),
    Case("rope", "padding", "window", False, 30.0),
    Case("rope", "cache", "window", False, None),
    Case("alibi", "default", "window", False, 2.0),
    Case("alibi", "gaps", "chunk", True, None),
    Case("alibi", "packed", "bidirectional", False, 2.0),
    Case("alibi", "padding", "window", True, None),
    Case("alibi", "cache", "bidirectional", True, 30.0),
    Case("t5", "default", "window", True, 2.0),
    Case("t5", "gaps", "window", False, None),
    Case("t5", "packed", "window", False, 30.0),
    Case("t5", "padding", "bidirectional", True, 2.0),
    Case("t5", "cache", "chunk", True, None),
    Case("fire", "default", "chunk", False, 2.0),
    Case("fire", "gaps", "bidirectional", False, 30.0),
    Case("fire", "packed", "chunk", False, None),
    Case("fire", "padding", "window", True, 30.0),
    Case("fire", "cache", "bidirectional", True, 2.0),
    Case("kerple", "default", "bidirectional", False, 30.0),
    Case("kerple", "gaps", "window", True, None),
    Case("kerple", "packed", "bidirectional", True, 2.0),
    Case("kerple", "padding", "window", True, 30.0),
    Case("kerple", "cache", "chunk", False, 2.0),
]


#: the cases that also run on flex (compiling flex for each of the thirty would take minutes
#: on the CPU): a bias with the cap on a window, rotary on packed documents with a
#: bidirectional window; tests/attn/test_patterns_hf.py runs flex on every pattern, with
#: padding, packing, explicit positions and the cache layout
FLEX_CASES = {"alibi-default-window-cap2", "rope-packed-bidirectional-cap2"}


def test_cases_cover_every_pair():
    axes = [ENCODINGS, EXTRAS, PATTERNS, [False, True], SOFTCAPS]
    rows = [(c.encoding, c.extras, c.pattern, c.sinks, c.softcap) for c in CASES]
    for i, j in itertools.combinations(range(len(axes)), 2):
        missing = set(itertools.product(axes[i], axes[j])) - {(r[i], r[j]) for r in rows}
        assert not missing, f"axes {i} and {j}: no case for {sorted(missing, key=str)}"


# --- the inputs of one case and the reference -----------------------------------------------


@dataclass
class Inputs:
    """One call: q, k, v, the keyword arguments of posenc.attention, and what the reference
    needs (positions ``[len]`` or ``[batch, len]``, padding, documents)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    kwargs: dict
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    padding: torch.Tensor | None = None
    segments: tuple[torch.Tensor, torch.Tensor] | None = None


def pattern_kwargs(pattern):
    return {
        "window": {"window": WINDOW},
        "bidirectional": {"window": BIDIRECTIONAL_WINDOW, "causal": False},
        "chunk": {"chunk": CHUNK},
    }[pattern]


def qkv(q_len, k_len):
    return (
        torch.randn(BATCH, HEADS, q_len, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, k_len, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, k_len, HEAD_DIM),
    )


def make_inputs(extras, pattern):
    """13 tokens (the cache: 6 queries after 13 cached keys) with the extras' positions."""
    kwargs = pattern_kwargs(pattern)
    if extras == "cache":
        q, k, v = qkv(6, 19)
        return Inputs(q, k, v, kwargs, torch.arange(13, 19), torch.arange(19))
    q, k, v = qkv(13, 13)
    if extras == "default":
        return Inputs(q, k, v, kwargs, torch.arange(13), torch.arange(13))
    if extras == "gaps":  # increasing in steps of 1 to 3, other steps in each row
        pos = torch.tensor(
            [
                [0, 1, 3, 4, 7, 8, 9, 12, 13, 16, 17, 18, 21],
                [2, 5, 6, 7, 9, 10, 13, 14, 15, 16, 19, 22, 23],
            ]
        )
        extra = {"q_positions": pos, "k_positions": pos}
        return Inputs(q, k, v, {**kwargs, **extra}, pos, pos)
    if extras == "packed":
        segments = torch.tensor([[0] * 5 + [1] * 8, [0] * 3 + [1] * 3 + [2] * 7])
        pos = from_segments(segments)
        extra = {"segment_ids": segments, "q_positions": pos, "k_positions": pos}
        return Inputs(q, k, v, {**kwargs, **extra}, pos, pos, segments=(segments, segments))
    if extras == "padding":  # row 0 left-padded, row 1 right-padded
        padding = torch.ones(BATCH, 13, dtype=torch.bool)
        padding[0, :3] = False
        padding[1, -2:] = False
        pos = from_padding(padding)
        extra = {"key_padding_mask": padding, "q_positions": pos, "k_positions": pos}
        return Inputs(q, k, v, {**kwargs, **extra}, pos, pos, padding=padding)
    raise AssertionError(extras)


def visible(inputs: Inputs) -> torch.Tensor:
    """Which keys each query sees, from the definitions: ``[batch | 1, 1, q_len, k_len]``."""
    kw = inputs.kwargs
    qp, kp = inputs.q_pos[..., :, None], inputs.k_pos[..., None, :]
    seen = torch.ones(torch.broadcast_shapes(qp.shape, kp.shape), dtype=torch.bool)
    causal = kw.get("causal", True)
    if causal:
        seen &= kp <= qp
    if kw.get("window") is not None:
        seen &= (kp > qp - kw["window"]) if causal else ((qp - kp).abs() <= kw["window"] // 2)
    if kw.get("chunk") is not None:
        seen &= torch.div(qp, kw["chunk"], rounding_mode="floor") == torch.div(
            kp, kw["chunk"], rounding_mode="floor"
        )
    seen = seen.view(-1, 1, *seen.shape[-2:])  # [b | 1, 1, q, k]
    if inputs.padding is not None:
        seen = seen & inputs.padding[:, None, None, :]
    if inputs.segments is not None:
        q_seg, k_seg = inputs.segments
        seen = seen & (q_seg[:, None, :, None] == k_seg[:, None, None, :])
    return seen


def reference(q, k, v, seen, *, scale=SCALE, bias=None, softcap=None, sinks=None):
    """Naive attention in the dtype of its inputs (float64 here): scores, the cap, the mask,
    the softmax over the keys and the sink, zero rows where nothing is seen. Returns
    ``(out, weights)``."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
    else:
        weights = scores.softmax(-1).nan_to_num(0.0)
    return weights @ v, weights


def case_reference(enc, inputs: Inputs, sinks=None, softcap=None, v=None, requires_grad=False):
    """The reference of one call in float64: rotary encodings rotate q, k in float64, bias
    encodings add their own table ``enc.bias(q_pos, k_pos)``. Returns ``(out, weights, q, k,
    bias, leaves)``, q and k as rotated, ``leaves`` the float64 tensors to differentiate."""
    v = inputs.v if v is None else v
    leaves = [t.detach().double().requires_grad_(requires_grad) for t in (inputs.q, inputs.k, v)]
    if sinks is not None:
        leaves.append(sinks.detach().double().requires_grad_(requires_grad))
    q, k, v64 = leaves[:3]
    bias = None
    if enc is not None and enc.kind == "rotary":
        q, k = enc(q, k, positions=inputs.q_pos, k_positions=inputs.k_pos)
    elif enc is not None:
        with torch.no_grad():
            bias = enc.bias(inputs.q_pos, inputs.k_pos).double()
    out, weights = reference(
        q,
        k,
        v64,
        visible(inputs),
        bias=bias,
        softcap=softcap,
        sinks=leaves[3] if sinks is not None else None,
    )
    return out, weights, q, k, bias, leaves


def bound(q, k, v, weights, bias=None, *, softcap=None, score_err=0.0):
    """``assert_close`` tolerances for float32 attention against the exact result: ``q, k``
    as the scores see them (rotated), ``weights`` the exact ones (float64, with the sink in
    their normaliser).

    Score ``j`` of row ``i`` (a dot product over ``d``, the scale, the bias; the cap's three
    roundings of a value at most ``|s|``, tanh being 1-Lipschitz) is off by at most ``δ_j =
    (d + 4 [+ 3])·eps·(scale·Σ_l |q_l k_l| + |bias_j|) + score_err`` (``score_err``: the
    bias's or the rotation's own float32 error, a number or per score). The output's channel
    moves by ``Σ_j w_j δ_j (v_j - out)`` to first order (``∂out/∂s_j = w_j (v_j - out)``;
    the sink's logit is exact and carries no value); the normaliser and the weighted sum add
    ``(2·k_len + 2)·eps·Σ_j w_j |v_j|``. The largest over rows and channels is ``atol``: a
    bound, not an estimate, ~2e-5 for unit-variance inputs here (the errors themselves are
    ~3e-7), while one key seen or hidden by mistake moves an output by ~1e-1.
    """
    group = q.shape[1] // k.shape[1]
    q64 = q.detach().double()
    k64 = k.detach().double().repeat_interleave(group, 1)
    v64 = v.detach().double().repeat_interleave(group, 1)
    w = weights.detach().double()
    size = SCALE * (q64.abs() @ k64.abs().transpose(-1, -2))  # [b, h, q, k]
    if bias is not None:
        size = size + bias.detach().double().abs()
    n = q.shape[-1] + 4 + (3 if softcap is not None else 0)
    delta = n * EPS * size + score_err
    out = w @ v64
    spread = (v64[:, :, None] - out[:, :, :, None]).abs()  # |v_j - out_i|: [b, h, q, k, d]
    moved = ((w * delta)[..., None] * spread).sum(-2)  # [b, h, q, d]
    sums = w @ v64.abs()
    return {"atol": (moved + (2 * k.shape[-2] + 2) * EPS * sums).max().item(), "rtol": 0.0}


def rotation_err(enc, inputs: Inputs):
    """How far the scores move by a rotary encoding's float32 rotation (what posenc.attention
    applies) from its float64 one, per score: ``scale·(Σ_l |Δq_l||k_l| + |q_l||Δk_l|)``,
    ``[b, h, q, k]``, to first order; 0 for other encodings."""
    if enc is None or enc.kind != "rotary":
        return 0.0
    pos = {"positions": inputs.q_pos, "k_positions": inputs.k_pos}
    q32, k32 = enc(inputs.q, inputs.k, **pos)
    q64, k64 = enc(inputs.q.double(), inputs.k.double(), **pos)
    dq, dk = (q32.double() - q64).abs(), (k32.double() - k64).abs()
    group = HEADS // KV_HEADS
    dk, k64 = dk.repeat_interleave(group, 1), k64.abs().repeat_interleave(group, 1)
    return SCALE * (dq @ k64.transpose(-1, -2) + q64.abs() @ dk.transpose(-1, -2))


def backends(sinks, softcap, grad=False, flex=True):
    """The backends that run a call, as posenc.attention documents them: SDPA refuses softcap
    and sinks, flex refuses sinks and has no backward on the CPU. ``flex=False`` leaves it
    out where compiling it for one more case would cost more than it tests (each costs
    seconds on the CPU)."""
    names = ["auto", "math"]
    if sinks is None and softcap is None:
        names.append("sdpa")
    if FLEX and flex and sinks is None and not grad:
        names.append("flex")
    return names


# --- forward against the reference ----------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference(case):
    """posenc.attention on every backend that runs the case, within the rounding bound of
    the float64 reference."""
    enc = make_encoding(case.encoding)
    inputs = make_inputs(case.extras, case.pattern)
    sinks = SINKS.clone() if case.sinks else None
    expected, weights, rq, rk, bias, _ = case_reference(enc, inputs, sinks, case.softcap)
    score_err = rotation_err(enc, inputs) + (0.0 if bias is None else bias_err(enc, bias))
    rounding = bound(rq, rk, inputs.v, weights, bias, softcap=case.softcap, score_err=score_err)
    for backend in backends(sinks, case.softcap, flex=case.id in FLEX_CASES):
        with torch.no_grad():  # compiled flex has no backward on the CPU
            out = posenc.attention(
                inputs.q,
                inputs.k,
                inputs.v,
                enc,
                backend=backend,
                sinks=sinks,
                softcap=case.softcap,
                **inputs.kwargs,
            )
        assert out.dtype == torch.float32 and out.shape == inputs.q.shape
        assert_close(out.double(), expected, **rounding, msg=lambda m, b=backend: f"{b}: {m}")


def test_the_reference_sees_what_the_pattern_hides():
    """The cases test something: each pattern hides keys the causal (or full) mask shows,
    the sinks and the soft cap of 2 change the outputs by far more than the bound."""
    for pattern in PATTERNS:
        inputs = make_inputs("default", pattern)
        seen = visible(inputs)
        everything = torch.ones_like(seen).tril() if pattern != "bidirectional" else None
        assert everything is None or (seen != everything).any(), pattern
        assert not seen.all(), pattern
    inputs = make_inputs("default", "window")
    plain, weights, q, k, _, _ = case_reference(None, inputs)
    rounding = bound(q, k, inputs.v, weights)
    for options in ({"sinks": SINKS}, {"softcap": 2.0}):
        changed, *_ = case_reference(None, inputs, **options)
        assert (changed - plain).abs().max() > 1000 * rounding["atol"], options


def test_chunk_without_causal_order():
    """``chunk=C, causal=False``: every key of the query's chunk, before or after it."""
    inputs = make_inputs("gaps", "chunk")
    inputs.kwargs["causal"] = False
    expected, weights, q, k, _, _ = case_reference(None, inputs)
    rounding = bound(q, k, inputs.v, weights)
    for backend in backends(None, None, flex=False):
        with torch.no_grad():
            out = posenc.attention(inputs.q, inputs.k, inputs.v, backend=backend, **inputs.kwargs)
        assert_close(out.double(), expected, **rounding, msg=backend)


# --- rows that see nothing, NaN in hidden slots -----------------------------------------------


def dead_inputs(kind):
    """Inputs where some queries see no key, and those rows (``[b, 1, q_len]`` bool)."""
    if kind == "pad":  # pads as a document of their own, hidden as keys: pad queries see none
        q, k, v = qkv(13, 13)
        padding = torch.ones(BATCH, 13, dtype=torch.bool)
        padding[0, -3:] = False
        segments = torch.tensor([[0] * 10 + [1] * 3, [0] * 13])
        pos = from_segments(segments, attention_mask=padding)
        kwargs = {
            "window": WINDOW,
            "key_padding_mask": padding,
            "segment_ids": segments,
            "q_positions": pos,
            "k_positions": pos,
        }
        inputs = Inputs(q, k, v, kwargs, pos, pos, padding=padding, segments=(segments, segments))
    else:  # queries placed beyond the keys' window or chunk
        q_pos = {
            "window": [30, 5, 12, 40],
            "bidirectional": [6, 30, 15, 1],
            "chunk": [2, 17, 12, 9],
        }
        q, k, v = qkv(4, 13)
        pos = torch.tensor(q_pos[kind])
        kwargs = {**pattern_kwargs(kind), "q_positions": pos, "k_positions": torch.arange(13)}
        inputs = Inputs(q, k, v, kwargs, pos, torch.arange(13))
    dead = ~visible(inputs).any(-1)
    assert dead.any() and not dead.all(), kind
    return inputs, dead.expand(BATCH, 1, -1)


@pytest.mark.parametrize("with_sinks", [False, True], ids=["plain", "sinks"])
@pytest.mark.parametrize("kind", ["pad", "window", "bidirectional", "chunk"])
def test_a_row_that_sees_no_key_is_zero(kind, with_sinks):
    """Zeros, never NaN, on every backend (and with sinks: the sink takes the whole row),
    the other rows as the reference; no gradient into the dead rows' queries, none NaN."""
    inputs, dead = dead_inputs(kind)
    sinks = SINKS.clone() if with_sinks else None
    enc = make_encoding("alibi")
    expected, weights, q, k, bias, _ = case_reference(enc, inputs, sinks)
    rounding = bound(q, k, inputs.v, weights, bias)
    rows = dead.expand(BATCH, HEADS, -1)
    for backend in backends(sinks, None, flex=kind == "window"):
        with torch.no_grad():
            out = posenc.attention(
                inputs.q, inputs.k, inputs.v, enc, backend=backend, sinks=sinks, **inputs.kwargs
            )
        assert out.isfinite().all(), backend
        assert (out[rows] == 0).all(), backend
        assert_close(out.double(), expected, **rounding, msg=backend)
    for backend in backends(sinks, None, grad=True):
        leaves = [t.clone().requires_grad_() for t in (inputs.q, inputs.k, inputs.v)]
        if sinks is not None:
            leaves.append(sinks.clone().requires_grad_())
        out = posenc.attention(
            *leaves[:3],
            enc,
            backend=backend,
            sinks=leaves[3] if sinks is not None else None,
            **inputs.kwargs,
        )
        grads = torch.autograd.grad(out, leaves, torch.randn_like(out))
        assert all(g.isfinite().all() for g in grads), backend
        assert (grads[0][rows] == 0).all(), backend


def nan_slots(pattern):
    """Inputs with key slots hidden from some queries, ``[(batch, key)]``: a future key
    (causal), a pad key, a key outside the window or before the chunk."""
    q, k, v = qkv(13, 13)
    padding = torch.ones(BATCH, 13, dtype=torch.bool)
    padding[1, 10] = False  # a pad in the middle: hidden from every query
    kwargs = {**pattern_kwargs(pattern), "key_padding_mask": padding}
    inputs = Inputs(q, k, v, kwargs, torch.arange(13), torch.arange(13), padding=padding)
    slots = [(0, 12), (1, 10), (0, 1)]  # future (causal) or far (bidirectional); pad; far
    return inputs, slots


@pytest.mark.parametrize("poisoned", ["k", "v", "kv"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_nan_in_a_slot_reaches_exactly_the_outputs_that_see_it(pattern, poisoned):
    """NaN in k and/or v at key slots hidden from some queries: every output that does not
    see the slot is finite and equals the reference over clean values, and every output
    that sees it is NaN (never a silent zero), on every backend, with and without a bias
    encoding."""
    inputs, slots = nan_slots(pattern)
    seen = visible(inputs).expand(BATCH, HEADS, 13, 13)
    k, v = inputs.k.clone(), inputs.v.clone()
    exposed = torch.zeros(BATCH, HEADS, 13, dtype=torch.bool)  # rows that see a NaN slot
    for b, j in slots:
        if "k" in poisoned:
            k[b, :, j] = float("nan")
        if "v" in poisoned:
            v[b, :, j] = float("nan")
        exposed[b] |= seen[b, :, :, j]
    assert (~exposed).any() and exposed.any()
    leaks = []  # every backend's, so that one report names them all
    for enc in (None, make_encoding("alibi")):
        expected, weights, q64, k64, bias, _ = case_reference(enc, inputs)
        rounding = bound(q64, k64, inputs.v, weights, bias)
        # flex (compiled per pattern and encoding, seconds each) on the window without a bias
        for backend in backends(None, None, flex=enc is None and pattern == "window"):
            with torch.no_grad():
                out = posenc.attention(inputs.q, k, v, enc, backend=backend, **inputs.kwargs)
            name = f"{backend} ({'no encoding' if enc is None else 'alibi'})"
            hidden = out.double()[~exposed]
            if not out[exposed].isnan().all():
                leaks.append(f"{name}: {int((~out[exposed].isnan()).sum())} seen NaNs lost")
            if not hidden.isfinite().all():
                leaks.append(f"{name}: NaN in {int(hidden.isnan().sum())} hidden outputs")
            elif not torch.allclose(hidden, expected[~exposed], **rounding):
                leaks.append(f"{name}: off the reference")
    assert not leaks, leaks


# --- gradients ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradients_match_reference(case, grad_tol, score_size):
    """Gradients into q, k, v and the sinks equal the float64 reference's (autograd), on
    every backend that trains."""
    enc = make_encoding(case.encoding)
    inputs = make_inputs(case.extras, case.pattern)
    sinks = SINKS.clone() if case.sinks else None
    expected_out, _, rq, rk, bias, leaves64 = case_reference(
        enc, inputs, sinks, case.softcap, requires_grad=True
    )
    upstream = torch.randn(expected_out.shape, dtype=torch.float64)
    expected = torch.autograd.grad(expected_out, leaves64, upstream)
    size = score_size(rq, rk, bias, scale=SCALE, allowed=visible(inputs))
    rounding = grad_tol(inputs.q, inputs.k, expected, size)
    for backend in backends(sinks, case.softcap, grad=True):
        leaves = [t.clone().requires_grad_() for t in (inputs.q, inputs.k, inputs.v)]
        if sinks is not None:
            leaves.append(sinks.clone().requires_grad_())
        out = posenc.attention(
            *leaves[:3],
            enc,
            backend=backend,
            sinks=leaves[3] if sinks is not None else None,
            softcap=case.softcap,
            **inputs.kwargs,
        )
        got = torch.autograd.grad(out, leaves, upstream.float())
        for name, g, e in zip(["q", "k", "v", "sinks"], got, expected, strict=False):
            assert_close(
                g.double(), e, **rounding, msg=lambda m, n=name, b=backend: f"{b} {n}: {m}"
            )


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"window": 0}, ValueError, "window"),
        ({"window": -3}, ValueError, "window"),
        ({"window": 1.5}, TypeError, "window"),
        ({"window": True}, TypeError, "window"),
        ({"window": "4"}, TypeError, "window"),
        ({"chunk": 0}, ValueError, "chunk"),
        ({"chunk": 2.0}, TypeError, "chunk"),
        ({"window": 4, "chunk": 4}, ValueError, "window.*chunk"),
        ({"sinks": torch.zeros(3)}, ValueError, "sinks"),
        ({"sinks": torch.zeros(1, HEADS)}, ValueError, "sinks"),
        ({"sinks": torch.zeros(KV_HEADS)}, ValueError, "sinks"),
        ({"sinks": torch.zeros(HEADS, dtype=torch.long)}, TypeError, "sinks"),
        ({"sinks": [0.0] * HEADS}, TypeError, "sinks"),
        ({"sinks": torch.zeros(HEADS, device="meta")}, ValueError, "sinks"),
        ({"softcap": 0.0}, ValueError, "softcap"),
        ({"softcap": -1.0}, ValueError, "softcap"),
        ({"softcap": float("nan")}, ValueError, "softcap"),
        ({"softcap": float("inf")}, ValueError, "softcap"),
        ({"softcap": "30"}, TypeError, "softcap"),
        ({"softcap": True}, TypeError, "softcap"),
        ({"softcap": 30.0, "backend": "sdpa"}, ValueError, "softcap"),
        ({"sinks": torch.zeros(HEADS), "backend": "sdpa"}, ValueError, "sinks"),
        ({"sinks": torch.zeros(HEADS), "backend": "flex"}, ValueError, "sinks"),
    ],
)
def test_bad_input_is_named(kwargs, error, named):
    q, k, v = qkv(5, 5)
    with pytest.raises(error, match=named):
        posenc.attention(q, k, v, **kwargs)
