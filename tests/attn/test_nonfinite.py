"""posenc.attention's rule for values that are not finite, on every backend: a NaN or an
infinity in a slot a query may not see never reaches that query's output, and one it does
see reaches it (NaN out, as plain attention gives), never a silent zero. The hidden half
over every mask pattern is in ``test_patterns_reference.py``; here: NaN queries, infinite
keys, NaN sinks, a NaN token under FoX's forget gates and under CoPE's counted gates.

Expected values come from the call on clean inputs (the rows a non-finite slot cannot
reach must not move: the same runner sees them, up to the runner switch's rounding) and
from the softmax's limits in float64 (a ``+inf`` score takes its row's weight).
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.runners.math import softmax_limits

BATCH, HEADS, SEQ, DIM = 1, 2, 8, 8
NAN, INF = float("nan"), float("inf")
BACKENDS = ["auto", "sdpa", "math", "flex"]


def qkv(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(BATCH, HEADS, SEQ, DIM, generator=g) for _ in range(3))


def attend(q, k, v, enc=None, backend="auto", **kwargs):
    with torch.no_grad():
        return posenc.attention(q, k, v, enc, backend=backend, **kwargs)


def reference(q, k, v, sinks=None):
    """Causal attention in float64 with the softmax's limits (sinks as a valueless logit)."""
    scores = (q.double() @ k.double().transpose(-1, -2)) * DIM**-0.5
    scores = scores.masked_fill(~torch.ones(SEQ, SEQ, dtype=torch.bool).tril(), -INF)
    if sinks is not None:
        sink = sinks.double().view(1, -1, 1, 1).expand(BATCH, HEADS, SEQ, 1)
        return softmax_limits(torch.cat((scores, sink), dim=-1))[..., :-1] @ v.double()
    return softmax_limits(scores) @ v.double()


# --- the softmax's limits -------------------------------------------------------------------


def test_softmax_limits():
    """+inf scores share the row, -inf ones get nothing, an all -inf row is zeros, a NaN
    makes its row NaN; finite rows are the plain softmax."""
    scores = torch.tensor(
        [
            [1.0, 2.0, 3.0],
            [INF, 0.0, INF],
            [-INF, 1.0, 1.0],
            [-INF, -INF, -INF],
            [NAN, INF, 0.0],
        ],
        dtype=torch.float64,
    )
    got = softmax_limits(scores)
    assert_close(got[0], scores[0].softmax(-1), rtol=0, atol=0)
    assert_close(got[1:4], torch.tensor([[0.5, 0, 0.5], [0, 0.5, 0.5], [0, 0, 0]]).double())
    assert got[4].isnan().all()


# --- queries, keys, sinks ---------------------------------------------------------------------


#: flex compiles a kernel per encoding (seconds each): no encoding and ALiBi stand for all
QUERY_CASES = [
    (encoding, backend)
    for encoding in (None, "rope", "alibi", "t5", "kerple", "fire", "shaw")
    for backend in BACKENDS
    if backend != "flex" or encoding in (None, "alibi")
]


@pytest.mark.parametrize(("encoding", "backend"), QUERY_CASES)
def test_a_nan_query_makes_its_row_nan_and_no_other(encoding, backend):
    enc = None if encoding is None else posenc.create(encoding, **_size(encoding))
    q, k, v = qkv()
    clean = attend(q, k, v, enc, backend)
    q[0, 0, 2, 0] = NAN
    out = attend(q, k, v, enc, backend)
    assert out[0, 0, 2].isnan().all()
    others = torch.ones(BATCH, HEADS, SEQ, dtype=torch.bool)
    others[0, 0, 2] = False
    assert_close(out[others], clean[others], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_key_makes_every_row_that_sees_it_nan(backend):
    q, k, v = qkv()
    clean = attend(q, k, v, backend=backend)
    k[0, 0, 3, 1] = NAN
    out = attend(q, k, v, backend=backend)
    assert out[0, 0, 3:].isnan().all()  # the rows at and after key 3 see it
    assert_close(out[0, 0, :3], clean[0, 0, :3], rtol=1e-5, atol=1e-6)
    assert_close(out[0, 1], clean[0, 1], rtol=1e-5, atol=1e-6)  # the other head's key is clean


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_infinite_key_takes_the_rows_it_scores_plus_infinity_in(backend):
    """k[0] = +inf in one channel: rows whose query is positive there score +inf on key 0
    and read its value exactly; the others score -inf and give key 0 no weight."""
    q, k, v = qkv()
    k[0, 0, 0, 0] = INF
    out = attend(q, k, v, backend=backend)
    expected = reference(q, k, v)
    assert out[0, 0].isfinite().all()
    top = q[0, 0, :, 0] > 0
    assert top.any() and (~top[1:]).any()
    assert_close(out[0, 0, top], v[0, 0, 0].expand(int(top.sum()), DIM), rtol=0, atol=0)
    assert_close(out.double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["auto", "math"])
def test_a_nan_sink_makes_its_head_nan_and_no_other(backend):
    q, k, v = qkv()
    sinks = torch.tensor([NAN, 0.5])
    out = attend(q, k, v, backend=backend, sinks=sinks)
    assert out[0, 0].isnan().all()
    assert_close(out[0, 1].double(), reference(q, k, v, sinks)[0, 1], rtol=1e-5, atol=1e-6)


def test_an_infinite_sink_takes_the_whole_row():
    q, k, v = qkv()
    out = attend(q, k, v, sinks=torch.tensor([INF, -INF]))
    assert (out[0, 0] == 0).all()
    assert_close(out[0, 1], attend(q, k, v)[0, 1], rtol=1e-5, atol=1e-6)  # -inf: no sink


# --- encodings whose bias reads more than positions ----------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "sdpa", "math"])
def test_fox_keeps_a_later_tokens_nan_out_of_earlier_rows(backend):
    """A NaN in token 5's input makes its gate and every later clock NaN: rows 0-4 do not
    see token 5 and keep their clean output; rows 5.. see it and are NaN."""
    torch.manual_seed(0)
    fox = posenc.create("fox", n_heads=HEADS, dim=16)
    x = torch.randn(BATCH, SEQ, 16)
    q, k, v = qkv()
    clean = attend(q, k, v, fox, backend, bias=fox.clock(x))
    x[0, 5, 0] = NAN
    out = attend(q, k, v, fox, backend, bias=fox.clock(x))
    assert out[:, :, 5:].isnan().all()
    assert_close(out[:, :, :5], clean[:, :, :5], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["auto", "math"])
def test_cope_counts_no_gate_a_row_cannot_see(backend):
    """A NaN in the last key: rows 0..L-2 cannot see it, so their counts stay finite and
    their outputs are those of attention over the keys before it; the last row is NaN."""
    torch.manual_seed(0)
    cope = posenc.create("cope", n_heads=HEADS, head_dim=DIM)
    q, k, v = qkv()
    k[0, :, -1, 0] = NAN
    out = attend(q, k, v, cope, backend)
    prefix = attend(q[:, :, :-1], k[:, :, :-1], v[:, :, :-1], cope, backend)
    assert out[:, :, -1].isnan().all()
    assert_close(out[:, :, :-1], prefix, rtol=1e-5, atol=1e-6)


def _size(name: str) -> dict:
    sizes = {"rope": {"head_dim": DIM}, "shaw": {"n_heads": HEADS, "head_dim": DIM}}
    return sizes.get(name, {"n_heads": HEADS})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_zero_nonfinite_zeroes_exactly_the_nonfinite_values(dtype):
    """NaN, +inf and -inf become +0; every finite value, -0.0 and the largest included,
    passes bit for bit; with validation off nothing changes."""
    from posenc.attn.checks import zero_nonfinite

    big = torch.finfo(dtype).max
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.5, -big, big])
    x = x.to(dtype)
    want = torch.where(torch.isfinite(x), x, torch.zeros((), dtype=dtype))
    got = zero_nonfinite(x)
    assert got.dtype == dtype
    assert torch.equal(got.view(_bits(dtype)), want.view(_bits(dtype)))
    with posenc.validation(False):
        assert zero_nonfinite(x) is x


def _bits(dtype: torch.dtype) -> torch.dtype:
    """The integer dtype of ``dtype``'s width: bit-for-bit comparisons (-0.0 is not +0.0)."""
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
