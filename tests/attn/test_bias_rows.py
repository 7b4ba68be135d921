"""A bias of the positions alone a block of query rows at a time (posenc.attn.runners.rows):
FIRE against a dense float64 reference, forward and backward (its MLP's parameters too),
what it saves, and auto's use of it."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc import attention
from posenc.attn.runners import distance as distance_module
from posenc.attn.runners import rows as rows_module
from posenc.attn.runners.flash import bias_flash_available
from posenc.attn.runners.rows import rows_attention
from posenc.bias import fire as fire_module
from posenc.functional import compiled

pytestmark = pytest.mark.skipif(not bias_flash_available(), reason="no CPU flash kernel")


def _fire(h, dtype=torch.float64):
    """FIRE with its threshold inside the test lengths, so both of its regimes show."""
    return posenc.create("fire", n_heads=h, init_threshold=20.0).to(dtype)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("b", "h", "kv_h", "n", "block", "m"),
    [
        (2, 4, 2, 70, 16, 0),  # grouped-query heads, blocks across the backward's 64
        (1, 2, 2, 37, None, 0),  # one block
        (3, 2, 2, 1, None, 0),  # one query
        # the queries are the keys from 17 on (the rest of a call whose first queries ran
        # elsewhere): the last rows of the whole
        (2, 2, 2, 45, 8, 17),
    ],
)
def test_float64_equals_the_reference_forward_and_backward(
    causal, b, h, kv_h, n, block, m, tol, dense_attention
):
    enc = _fire(h)
    q = torch.randn(b, h, n, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(b, kv_h, n, 8, dtype=torch.float64, requires_grad=True) for _ in "kv")
    positions = torch.arange(n)
    params = list(enc.parameters())

    def rows(i0, i1, keys, masked, *params):
        return enc.masked_bias(positions[i0:i1], positions[:keys], masked)

    out = rows_attention(q[:, :, m:], k, v, rows, params, 0.3, causal, block, q_offset=m)
    bias = enc.bias(positions, positions)
    expected = dense_attention(q, k, v, bias=bias, causal=causal, scale=0.3)[:, :, m:]
    rounding = tol(torch.float64, n=8 * (n + 16), scale=10.0)
    torch.testing.assert_close(out, expected, **rounding)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, [q, k, v, *params], grad_out)
    want = torch.autograd.grad(expected, [q, k, v, *params], grad_out)
    for g, w in zip(got, want, strict=True):
        scale = max(w.abs().max().item(), 1.0)
        torch.testing.assert_close(g, w, **tol(torch.float64, n=8 * b * h * (n + 16), scale=scale))


def test_nothing_of_the_scores_is_saved():
    b, h, n = 3, 4, 96
    enc = _fire(h, torch.float32)
    q, k, v = (torch.randn(b, h, n, 8, requires_grad=True) for _ in "qkv")
    positions = torch.arange(n)
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = rows_attention(
            q,
            k,
            v,
            lambda i0, i1, n, masked, *_: enc.masked_bias(positions[i0:i1], positions[:n], masked),
            list(enc.parameters()),
            0.3,
            True,
        )
    assert shapes, "nothing saved: the hook did not see the Function"
    assert all(math.prod(s) < h * n * n for s in shapes), shapes
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.parameters())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("form", ["matmul", "pieces"])
def test_auto_takes_it_without_a_table_and_equals_math(
    form, causal, training, monkeypatch, attention_tol, grad_tol, score_size
):
    # FIRE's rows from its MLP's weights, or from its pieces (forced at this size, run
    # eagerly), each block differentiated with respect to them
    if form == "pieces":
        monkeypatch.setattr(compiled, "ENABLED", False)
        monkeypatch.setattr(fire_module, "pieces_pay", lambda scores, device: True)
    enc = _fire(4, torch.float32)
    calls = []
    real = rows_module.rows_attention
    monkeypatch.setattr(
        rows_module, "rows_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    q, k, v = (torch.randn(2, 4, 70, 16, requires_grad=training) for _ in "qkv")
    inputs = [q, k, v, *enc.parameters()]
    results = []
    for backend in ("auto", "math"):
        with torch.set_grad_enabled(training):
            out = attention(q, k, v, enc, causal=causal, backend=backend)
        grads = torch.autograd.grad(out.sum(), inputs) if training else ()
        results.append((out, grads))
    assert calls == [1]
    with torch.no_grad():
        bias = enc.bias(torch.arange(70), torch.arange(70))
    tol = attention_tol(q, k, v, bias=bias, causal=causal)
    torch.testing.assert_close(results[0][0], results[1][0], atol=2 * tol["atol"], rtol=0.0)
    size = score_size(q, k, bias=bias, causal=causal)
    for g, w in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(g, w, **grad_tol(q, k, results[1][1], size))
    # a given table (a model's, shared by its layers) runs on the flash path instead
    with torch.no_grad():
        attention(q, k, v, enc, causal=causal, bias=bias)
    assert calls == [1]


def test_an_offset_needs_its_keys():
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8)
    with pytest.raises(ValueError, match=r"q_offset \+ q_len keys \(3 \+ 5\), got 7"):
        rows_attention(q, k, k, lambda *a: None, [], 0.3, True, q_offset=3)


@pytest.mark.parametrize("threshold", [20.0, 20.5, 100.0])
def test_fire_before_its_threshold_runs_on_the_distance_blocks(threshold, monkeypatch, tol):
    """Causal FIRE over the indices: the queries before ``L`` (strictly: 20 at ``L = 20``
    is a tie of the normaliser's maximum) on the distance blocks, the rest on the rows;
    all of them (``L`` past the last query) on the blocks alone. Against the math path,
    in float64, forward and the gradients of q, k, v and every parameter."""
    enc = posenc.create("fire", n_heads=2, init_threshold=threshold).to(torch.float64)
    seen = {"blocks": [], "rows": []}
    spied = (
        ("blocks", distance_module, "distance_attention"),
        ("rows", rows_module, "rows_attention"),
    )
    for name, module, module_name in spied:
        real = getattr(module, module_name)

        def spy(q, *args, _real=real, _name=name, **kwargs):
            seen[_name].append(q.shape[2])
            return _real(q, *args, **kwargs)

        monkeypatch.setattr(module, module_name, spy)
    q, k, v = (torch.randn(2, 2, 45, 8, dtype=torch.float64, requires_grad=True) for _ in "qkv")
    inputs = [q, k, v, *enc.parameters()]
    results = []
    for backend in ("auto", "math"):
        out = attention(q, k, v, enc, backend=backend)
        results.append((out, torch.autograd.grad(out.sum(), inputs)))
    first = min(45, math.ceil(threshold))
    assert seen == {"blocks": [first], "rows": [45 - first] if first < 45 else []}
    torch.testing.assert_close(results[0][0], results[1][0], **tol(torch.float64, n=200))
    for g, w in zip(results[0][1], results[1][1], strict=True):
        scale = max(w.abs().max().item(), 1.0)
        torch.testing.assert_close(g, w, **tol(torch.float64, n=4 * 45 * 45, scale=scale))


def test_the_backward_block_is_named_when_bad():
    q = torch.randn(1, 2, 5, 8)
    for bad, error in ((0, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="backward_block"):
            rows_attention(q, q, q, lambda *a: None, [], 0.3, True, backward_block=bad)
