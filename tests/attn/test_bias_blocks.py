"""Shift-invariant biases from their 2L - 1 distances (posenc.attn.runners.distance): the
values, the blockwise kernel calls over reversed queries and their backward, and
attention's use of them for inference and training."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc import attention, registry
from posenc.attn import planner as plan_module
from posenc.attn.kernels.flash_blocks import bias_flash_available, block_size
from posenc.attn.runners import distance as distance_module
from posenc.attn.runners.distance import (
    DistanceGrad,
    distance_attention,
    distance_values,
    negligible,
)
from posenc.base import ShiftInvariant
from posenc.models import TransformerLM

BIAS = [n for n in posenc.available() if posenc.info(n).kind == "bias"]
SHIFT_INVARIANT = ["alibi", "kerple", "t5"]
needs_kernel = pytest.mark.skipif(not bias_flash_available(), reason="no CPU flash kernel")


def _trained(name, n_heads=4, dtype=torch.float32):
    """The encoding with its parameters moved off their initial values (T5 starts at 0)."""
    enc = posenc.create(name, n_heads=n_heads).to(dtype)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return enc


def _causal_bias(enc, n, causal):
    """The dense ``[h, n, n]`` bias over ``0..n-1``, ``-inf`` after each query if causal."""
    positions = torch.arange(n)
    bias = enc.bias(positions, positions)
    if causal:
        bias = bias.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return bias


def test_the_shift_invariant_encodings_are_the_expected_ones():
    claimed = [n for n in BIAS if issubclass(registry.get(n), ShiftInvariant)]
    assert claimed == SHIFT_INVARIANT


@pytest.mark.parametrize("name", SHIFT_INVARIANT)
def test_bias_depends_on_the_distance_only(name):
    # integer positions: the shifted differences are the same numbers, so the bias is equal
    enc = _trained(name)
    q_pos, k_pos = torch.randint(0, 300, (7,)), torch.randint(0, 300, (9,))
    for shift in (1, 17, 1000):
        assert torch.equal(enc.bias(q_pos + shift, k_pos + shift), enc.bias(q_pos, k_pos))


@pytest.mark.parametrize("name", SHIFT_INVARIANT)
@pytest.mark.parametrize("causal", [True, False])
def test_distance_values_slide_into_the_table(name, causal):
    # in reverse query order the rows are windows of the 2n - 1 values: the same numbers
    enc = _trained(name)
    values = distance_values(enc, 37, causal)
    assert values.shape == (4, 73)
    rows = values.unfold(-1, 37, 1).flip(-2)  # row i: query i
    assert torch.equal(rows, _causal_bias(enc, 37, causal))


def test_block_size_is_an_eighth_within_bounds():
    assert [block_size(n) for n in (1, 512, 1024, 2048, 4096, 16384)] == [
        64,
        64,
        128,
        256,
        256,
        256,
    ]


@needs_kernel
@pytest.mark.parametrize("name", SHIFT_INVARIANT)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("b", "h", "kv_h", "n", "block"),
    [
        (2, 4, 2, 37, 7),  # grouped-query heads, a short last block
        (1, 4, 4, 37, None),  # one block
        (2, 4, 4, 130, 64),  # the backward's blocks of 64 across the forward's
        (1, 4, 4, 1, None),  # one query
    ],
)
def test_float64_equals_the_reference_forward_and_backward(
    name, causal, b, h, kv_h, n, block, tol, dense_attention
):
    enc = _trained(name, h, torch.float64)
    q = torch.randn(b, h, n, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(b, kv_h, n, 8, dtype=torch.float64, requires_grad=True) for _ in "kv")
    grad_out = torch.randn(b, h, n, 8, dtype=torch.float64)
    scale = 8**-0.5
    inputs = [q, k, v, *enc.parameters()]
    out = distance_attention(q, k, v, distance_values(enc, n, causal), scale, causal, block)
    expected = dense_attention(q, k, v, bias=_causal_bias(enc, n, causal), scale=scale)
    # sums of a few hundred terms of size ~10 (scores, softmax, weighted values, gradients)
    rounding = tol(torch.float64, n=8 * (n + 16), scale=10.0)
    torch.testing.assert_close(out, expected, **rounding)
    got = torch.autograd.grad(out, inputs, grad_out)
    want = torch.autograd.grad(expected, inputs, grad_out)
    for g, w in zip(got, want, strict=True):
        scale_g = max(w.abs().max().item(), 1.0)
        rounding = tol(torch.float64, n=8 * b * h * (n + 16), scale=scale_g)
        torch.testing.assert_close(g, w, **rounding)


@needs_kernel
def test_a_steep_alibi_flushes_only_what_would_be_subnormal(tol, dense_attention):
    """Slopes of 100: far keys' weights fall below float32's smallest normal; the backward
    flushes them to zero and keeps every gradient within float32 rounding of float64."""
    enc = posenc.create("alibi", n_heads=2, slopes=[100.0, 0.5])
    q, k, v = (torch.randn(1, 2, 50, 8, requires_grad=True) for _ in "qkv")
    out = distance_attention(q, k, v, distance_values(enc, 50, True), 8**-0.5, True)
    expected = dense_attention(q, k, v, bias=_causal_bias(enc, 50, True), scale=8**-0.5)
    got = torch.autograd.grad(out.sum(), (q, k, v))
    want = torch.autograd.grad(expected.sum(), (q, k, v))
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), w.double(), **tol(n=200, scale=w.abs().max().item()))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_and_low_precision_inputs_keep_a_float32_bias(
    dtype, attention_tol, dense_attention, bfloat16_attention_runs
):
    if dtype == torch.bfloat16 and not bfloat16_attention_runs:
        pytest.skip("torch's bfloat16 CPU attention raises in pack_vnni2 on this ATen build")
    enc = _trained("t5")
    # [b, n, h, d] storage, as from a projection
    q = torch.randn(2, 40, 4, 8).transpose(1, 2).to(dtype)
    k, v = (torch.randn(2, 40, 2, 8).transpose(1, 2).to(dtype) for _ in "kv")
    with torch.no_grad():
        out = distance_attention(q, k, v, distance_values(enc, 40, True), 8**-0.5, True, 16)
    assert out.dtype == dtype
    expected = dense_attention(q, k, v, bias=_causal_bias(enc, 40, True), scale=8**-0.5)
    tol = attention_tol(q, k, v, bias=_causal_bias(enc, 40, False), scale=8**-0.5, causal=True)
    torch.testing.assert_close(out.double(), expected, **tol)


def test_the_distance_gradient_sums_each_anti_diagonal():
    # blocks in the order flash_backward runs them under a causal mask: keys non-decreasing
    b, h, n, block = 2, 3, 11, 4
    values = torch.zeros(h, 2 * n - 1)
    sink = DistanceGrad(b, h, n, block, values)
    expected = torch.zeros(h, 2 * n - 1)
    for r0 in reversed(range(0, n, block)):
        rows, keys = min(block, n - r0), n - r0
        ds = torch.randn(b * h, rows, keys)
        sink(r0, ds)
        for a in range(rows):
            for j in range(keys):
                expected[:, r0 + a + j] += ds.view(b, h, rows, keys)[:, :, a, j].sum(0)
    torch.testing.assert_close(sink.total, expected)


def test_bad_shapes_are_refused():
    enc = posenc.create("t5", n_heads=2)
    q = torch.randn(1, 2, 9, 4)
    with pytest.raises(ValueError, match=r"\[heads, 2L - 1\] values"):
        distance_attention(q, q, q, distance_values(enc, 8, True), 0.5, True)
    with pytest.raises(ValueError, match="block must be an int >= 1"):
        distance_attention(q, q, q, distance_values(enc, 9, True), 0.5, True, 0)


@needs_kernel
@pytest.mark.parametrize("name", SHIFT_INVARIANT)
@pytest.mark.parametrize("training", [False, True])
def test_auto_takes_it_and_equals_math(
    name, training, monkeypatch, attention_tol, grad_tol, score_size
):
    """Over default positions, inference and training (the encoding's parameters too) on
    the CPU run here, with the outputs and gradients of the math path."""
    enc = _trained(name)
    q, k, v = (torch.randn(2, 4, 300, 8, requires_grad=training) for _ in "qkv")
    calls = []
    real = distance_module.distance_attention
    monkeypatch.setattr(
        distance_module, "distance_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    inputs = [q, k, v, *enc.parameters()]
    results = []
    for backend in ("auto", "math"):
        with torch.set_grad_enabled(training):
            out = attention(q, k, v, enc, backend=backend)
        grads = torch.autograd.grad(out.sum(), inputs) if training else ()
        results.append((out, grads))
    assert calls == [1]  # auto, not math
    bias = _causal_bias(enc, 300, False)
    tol = attention_tol(q, k, v, bias=bias, causal=True)
    torch.testing.assert_close(results[0][0], results[1][0], atol=2 * tol["atol"], rtol=0.0)
    size = score_size(q, k, bias=bias, causal=True)
    for g, w in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(g, w, **grad_tol(q, k, results[1][1], size))


@pytest.mark.parametrize("case", ["explicit positions", "decode step", "padding"])
def test_auto_keeps_other_paths_where_it_does_not_apply(case, monkeypatch):
    # explicit positions, a cached decode step (q_len != k_len) and masks are not the
    # default arange(L) of both with the causal mask alone
    monkeypatch.setattr(distance_module, "distance_attention", _fail)
    enc = _trained("t5")
    q, k, v = (torch.randn(2, 4, 300, 8) for _ in "qkv")
    kwargs = {}
    if case == "explicit positions":
        kwargs = {"q_positions": torch.arange(300), "k_positions": torch.arange(300)}
    elif case == "decode step":
        q = q[:, :, -1:]
    else:
        kwargs = {"key_padding_mask": torch.ones(2, 300, dtype=torch.bool)}
    out = attention(q, k, v, enc, **kwargs)
    assert out.shape == q.shape


@needs_kernel
@pytest.mark.parametrize("name", ["t5", "alibi"])
def test_a_model_trains_on_it_with_the_gradients_of_the_other_paths(name, monkeypatch, tol):
    """Each layer takes its 2L - 1 values (no shared table); loss and gradients equal those
    of the path taken without the CPU flash kernel (T5: SDPA's math backward; ALiBi: its
    fused linear-bias path)."""
    torch.manual_seed(0)
    model = TransformerLM(64, 32, 2, 4, name, n_kv_heads=2).double()
    ids = torch.randint(0, 64, (2, 41))
    calls = []
    real = distance_module.distance_attention
    monkeypatch.setattr(
        distance_module, "distance_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    runs = []
    for flash in (True, False):
        monkeypatch.setattr(plan_module, "bias_flash_available", lambda flash=flash: flash)
        model.zero_grad(set_to_none=True)
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        runs.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert len(calls) == 2  # a layer each, with the kernel only
    torch.testing.assert_close(runs[0][0], runs[1][0], **tol(torch.float64, n=20_000))
    for n, g in runs[0][1].items():
        scale = g.abs().max().item() + 1e-3
        torch.testing.assert_close(g, runs[1][1][n], **tol(torch.float64, n=20_000, scale=scale))


def _fail(*args, **kwargs):
    raise AssertionError("the distance path ran where it does not apply")


@pytest.mark.parametrize("causal", [True, False])
def test_negligible_flushes_only_weights_below_the_smallest_normal(causal):
    """Every distance set to -inf weighs less than float32's tiny in every row (exact
    float64 softmax), and a steep head does get distances flushed."""
    enc = posenc.create("alibi", n_heads=4, slopes=[8.0, 2.0, 0.5, 0.01])
    n = 60
    q, k = (torch.randn(2, 4, n, 8) for _ in "qk")
    values = distance_values(enc, n, causal)
    flushed = negligible(values, q, k, 8**-0.5)
    gone = torch.isinf(flushed) & ~torch.isinf(values)  # [h, 2n - 1]
    assert gone[0].any() and not gone[3].any()  # the steep head loses its far keys, not the flat
    rows = values.unfold(-1, n, 1).flip(-2)  # [h, n, n], row i = query i
    scores = (q.double() @ k.double().transpose(-1, -2)) * 8**-0.5 + rows.double()
    weights = scores.softmax(-1)  # [b, h, n, n]
    gone_rows = gone.unfold(-1, n, 1).flip(-2).expand_as(weights)
    assert (weights[gone_rows] < torch.finfo(torch.float32).tiny).all()
    assert not torch.isinf(flushed[:, n - 1]).any()  # distance 0 stays


def test_negligible_flushes_nothing_for_non_finite_inputs():
    values = distance_values(posenc.create("alibi", n_heads=2, slopes=[50.0, 50.0]), 9, True)
    q = torch.full((1, 2, 9, 4), float("nan"))
    assert torch.equal(negligible(values, q, q, 0.5), values)


@needs_kernel
@pytest.mark.parametrize("causal", [True, False])
def test_a_linear_bias_that_flushes_nothing_skips_negligible_with_the_same_bits(causal):
    """A bias linear in the distance spreads max|m|·(L - 1) below its value at distance 0,
    known on the host: where that is short of what negligible flushes, distance_attention
    skips it, and the result is the same bits; a steep one still flushes."""
    from posenc.attn.runners.distance import FLUSH_MARGIN, linear_spread

    n = 50
    q, k, v = (torch.randn(1, 4, n, 8) for _ in "qkv")
    for slopes, skipped in (([0.5, 0.25, 0.125, 0.0625], True), ([8.0, 2.0, 0.5, 0.01], False)):
        enc = posenc.create("alibi", n_heads=4, slopes=slopes)
        spread = linear_spread(enc, n, causal)
        assert spread == max(slopes) * (n - 1)
        assert (spread < FLUSH_MARGIN * -math.log(torch.finfo(torch.float32).tiny)) is skipped
        values = distance_values(enc, n, causal)
        known = distance_attention(q, k, v, values, 8**-0.5, causal, spread=spread)
        assert torch.equal(known, distance_attention(q, k, v, values, 8**-0.5, causal))
    assert linear_spread(posenc.create("t5", n_heads=4), n, causal) is None
    assert linear_spread(posenc.create("alibi", n_heads=4, symmetric=True), n, False) is None
