"""The CPU training path of bias encodings: the flash forward with the blockwise backward
(posenc.attn.runners.flash), its use by attention's auto backend, and the bias table
TransformerLM computes once per forward and shares across layers."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc import attention
from posenc.attn import AttentionContext
from posenc.attn import planner as plan_module
from posenc.attn.planner import AttnShape
from posenc.attn.runners.flash import BLOCK, bias_flash_attention, bias_flash_available
from posenc.models import TransformerLM
from posenc.models import shared as shared_module
from posenc.positions import from_segments

pytestmark = pytest.mark.skipif(not bias_flash_available(), reason="no CPU flash kernel")


def _reference(q, k, v, bias, scale, causal):
    """softmax(q kᵀ·scale + bias) v in float64, key/value heads repeated, by index causal."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale + bias.double()
    if causal:
        n = q.shape[2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1) @ v.double()


def _inputs(b, h, kv_h, q_len, k_len, d, dtype, bias_batch=None):
    q = torch.randn(b, h, q_len, d, dtype=dtype, requires_grad=True)
    k = torch.randn(b, kv_h, k_len, d, dtype=dtype, requires_grad=True)
    v = torch.randn(b, kv_h, k_len, d, dtype=dtype, requires_grad=True)
    shape = (h, q_len, k_len) if bias_batch is None else (bias_batch, h, q_len, k_len)
    bias = (2 * torch.randn(shape, dtype=torch.float64)).to(
        torch.float64 if dtype == torch.float64 else torch.float32
    )
    return q, k, v, bias.requires_grad_()


def _grads(out, inputs, grad_out):
    return torch.autograd.grad(out, inputs, grad_out)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("b", "h", "kv_h", "length", "block", "bias_batch"),
    [
        (2, 4, 4, 70, BLOCK, None),  # odd length, two blocks, the last one short
        (3, 4, 2, 37, 16, None),  # grouped-query heads, three blocks
        (2, 2, 1, 1, BLOCK, None),  # one query
        (2, 2, 2, 45, 8, 2),  # a bias per sequence
        (3, 2, 2, 20, 8, 1),  # one bias for the batch, given 4-D
    ],
)
def test_float64_equals_reference(causal, b, h, kv_h, length, block, bias_batch, tol):
    q, k, v, bias = _inputs(b, h, kv_h, length, length, 16, torch.float64, bias_batch)
    scale = 0.3
    grad_out = torch.randn(b, h, length, 16, dtype=torch.float64)
    out = bias_flash_attention(q, k, v, bias, scale, causal, block)
    expected = _reference(q, k, v, bias, scale, causal)
    # sums of a few hundred terms of size ~10 (scores, softmax, weighted values, their grads)
    rounding = tol(torch.float64, n=8 * (length + 16), scale=10.0)
    torch.testing.assert_close(out, expected, **rounding)
    got = _grads(out, (q, k, v, bias), grad_out)
    want = _grads(expected, (q, k, v, bias), grad_out)
    for name, g, w in zip(["q", "k", "v", "bias"], got, want, strict=True):
        assert g.shape == w.shape, name
        scale_g = max(w.abs().max().item(), 1.0)
        torch.testing.assert_close(g, w, **tol(torch.float64, n=8 * (length + 16), scale=scale_g))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
def test_low_precision_within_rounding(
    dtype, causal, attention_tol, grad_tol, score_size, bfloat16_attention_runs
):
    if dtype == torch.bfloat16 and not bfloat16_attention_runs:
        pytest.skip("torch's bfloat16 CPU attention raises in pack_vnni2 on this ATen build")
    q, k, v, bias = _inputs(2, 4, 2, 67, 67, 16, dtype)
    scale = 1 / math.sqrt(16)
    out = bias_flash_attention(q, k, v, bias, scale, causal)
    assert out.dtype == dtype
    expected = _reference(q, k, v, bias, scale, causal)
    torch.testing.assert_close(
        out.double(), expected, **attention_tol(q, k, v, bias=bias, scale=scale, causal=causal)
    )
    grad_out = torch.randn(out.shape, dtype=dtype)
    got = _grads(out, (q, k, v, bias), grad_out)
    want = _grads(expected, (q, k, v, bias), grad_out.double())
    size = score_size(q, k, bias=bias, scale=scale, causal=causal)
    # bf16: the backward reads the output rounded to bf16, in D = rowsum(dO ⊙ O), off by
    # err_d; dS = P ⊙ (dP - D) carries it to the bias (a sum over the batch), to dq (times
    # scale·|k|) and to dk (a sum over the queries of the group's heads, times scale·|q|)
    eps = torch.finfo(dtype).eps if dtype != torch.float32 else 0.0
    err_d = eps / 2 * (grad_out.double().abs() * out.double().abs()).sum(-1).max().item()
    q_max, k_max = q.detach().abs().max().item(), k.detach().abs().max().item()
    extra = {
        "q": err_d * scale * k_max,
        "k": err_d * scale * q_max * q.shape[2] * (q.shape[1] // k.shape[1]),
        "v": 0.0,
        "bias": err_d * q.shape[0],
    }
    for name, g, w in zip(["q", "k", "v", "bias"], got, want, strict=True):
        assert g.dtype == (torch.float32 if name == "bias" else dtype), name
        rounding = grad_tol(q, k, want, size)
        rounding["atol"] += extra[name]
        if name != "bias":  # both gradients are rounded to the inputs' dtype
            rounding["atol"] += eps * w.abs().max().item()
        torch.testing.assert_close(
            g.double(), w.double(), **rounding, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_non_contiguous_inputs(tol):
    q = torch.randn(2, 33, 4, 8, dtype=torch.float64).transpose(1, 2).requires_grad_()
    k = torch.randn(2, 33, 4, 8, dtype=torch.float64).transpose(1, 2).requires_grad_()
    v = torch.randn(2, 4, 8, 33, dtype=torch.float64).transpose(-1, -2).requires_grad_()
    assert not q.is_contiguous() and not v.is_contiguous()
    bias = torch.randn(4, 33, 33, dtype=torch.float64).transpose(-1, -2).requires_grad_()
    out = bias_flash_attention(q, k, v, bias, 0.4, True, 16)
    expected = _reference(q, k, v, bias, 0.4, True)
    rounding = tol(torch.float64, n=1000, scale=10.0)
    torch.testing.assert_close(out, expected, **rounding)
    grad_out = torch.randn_like(expected)
    for g, w in zip(
        _grads(out, (q, k, v, bias), grad_out),
        _grads(expected, (q, k, v, bias), grad_out),
        strict=True,
    ):
        torch.testing.assert_close(g, w, **rounding)


def test_no_batch_by_score_tensor_is_saved():
    """The forward keeps q, k, v, the bias it was given, the output and the log-sum-exp:
    nothing of ``[batch, heads, q_len, k_len]``."""
    b, h, n = 3, 4, 96
    q, k, v, bias = _inputs(b, h, h, n, n, 8, torch.float32)
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = bias_flash_attention(q, k, v, bias, 0.3, True)
    assert shapes, "nothing saved: the hook did not see the Function"
    assert all(s != (b, h, n, n) and math.prod(s) < b * h * n * n for s in shapes), shapes
    out.sum().backward()  # and the backward runs with them


# Shaw trains on its own blockwise path (tests/attn/test_shaw_grad.py), the shift-invariant
# biases on their distances (tests/attn/test_bias_blocks.py), FIRE by blocks of rows without
# a table (tests/attn/test_bias_rows.py) and here with the table a model shares


def test_alibi_table_through_the_function(tol):
    """ALiBi trains on its fused path; given as a table, its bias runs here as any other."""
    enc = posenc.create("alibi", n_heads=4)
    q, k, v, _ = _inputs(1, 4, 4, 40, 40, 8, torch.float64)
    bias = enc.bias(torch.arange(40, dtype=torch.float64), torch.arange(40, dtype=torch.float64))
    out = bias_flash_attention(q, k, v, bias, 0.35, True, 16)
    torch.testing.assert_close(
        out, _reference(q, k, v, bias, 0.35, True), **tol(torch.float64, n=500, scale=40.0)
    )


def _math_pair(q, k, v, enc, **kwargs):
    """(auto, math) outputs and gradients of q, k, v for the same call."""
    res = []
    for backend in ("auto", "math"):
        out = attention(q, k, v, enc, backend=backend, **kwargs)
        res.append((out, _grads(out, (q, k, v), torch.ones_like(out))))
    return res


def test_masks_explicit_positions_and_cached_keys(tol):
    """Padding with queries that see no key (zeros, zero gradient), packed documents with
    positions that restart, and queries after cached keys: the masks fold into the bias."""
    enc = posenc.create("t5", n_heads=2).double()
    q, k, v, _ = _inputs(2, 2, 2, 24, 24, 8, torch.float64)
    rounding = tol(torch.float64, n=500, scale=10.0)
    pad = torch.ones(2, 24, dtype=torch.bool)
    pad[0, :5] = False  # left padding: queries 0..4 see no key under the causal mask
    segments = torch.tensor([[0] * 10 + [1] * 14, [0] * 24])
    cases = [
        {"key_padding_mask": pad},
        {
            "segment_ids": segments,
            "q_positions": from_segments(segments),
            "k_positions": from_segments(segments),
        },
        {"q_positions": torch.arange(24).flip(0), "k_positions": torch.arange(24).flip(0)},
    ]
    for kwargs in cases:
        (out, grads), (ref, ref_grads) = _math_pair(q, k, v, enc, **kwargs)
        torch.testing.assert_close(out, ref, **rounding)
        for g, w in zip(grads, ref_grads, strict=True):
            assert torch.isfinite(g).all()
            torch.testing.assert_close(g, w, **rounding)
    out = attention(q, k, v, enc, key_padding_mask=pad)
    assert (out[0, :, :5] == 0).all()
    (gq,) = torch.autograd.grad(out.sum(), q)
    assert (gq[0, :, :5] == 0).all()
    # queries after 10 cached keys (bottom-right causal), by default positions
    q_new = q[:, :, :14].detach().requires_grad_()
    (out, grads), (ref, ref_grads) = _math_pair(q_new, k, v, enc)
    torch.testing.assert_close(out, ref, **rounding)
    for g, w in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, w, **rounding)


def test_precomputed_table_is_used_and_checked():
    enc = posenc.create("kerple", n_heads=2)
    q, k, v, _ = _inputs(1, 2, 2, 9, 9, 8, torch.float32)
    table = enc.bias(torch.arange(9), torch.arange(9))
    out = attention(q, k, v, enc, bias=table)
    (grad,) = torch.autograd.grad(out.sum(), enc.parameters().__next__(), allow_unused=True)
    assert grad is not None and grad.abs().sum() > 0  # reached through the table
    # a different table changes the result: it is read, not recomputed
    other = attention(q, k, v, enc, bias=torch.zeros(2, 9, 9), backend="sdpa")
    assert not torch.allclose(other, attention(q, k, v, enc, backend="sdpa"))
    with pytest.raises(ValueError, match=r"bias must be \[heads, q_len, k_len\] = \[2, 9, 9\]"):
        attention(q, k, v, enc, bias=torch.zeros(2, 9, 8))
    with pytest.raises(ValueError, match="bias must be"):
        attention(q, k, v, enc, bias=torch.zeros(3, 2, 9, 9))
    with pytest.raises(TypeError, match=r"bias must be a floating-point tensor, got torch\.int64"):
        attention(q, k, v, enc, bias=torch.zeros(2, 9, 9, dtype=torch.long))
    with pytest.raises(
        ValueError, match="bias is the table of a bias encoding, but the encoding is 'rope'"
    ):
        attention(q, k, v, posenc.create("rope", head_dim=8), bias=table)
    with pytest.raises(ValueError, match="'shaw' computes its bias from q"):
        attention(q, k, v, posenc.create("shaw", n_heads=2, head_dim=8), bias=table)
    with pytest.raises(ValueError, match="causal=True needs q_len == k_len"):
        bias_flash_attention(q[:, :, :4], k, v, table[:, :4], 0.3, True)
    with pytest.raises(ValueError, match="block must be an int >= 1"):
        bias_flash_attention(q, k, v, table, 0.3, False, 0)


def _step(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["fire"])  # the one bias neither per score nor by distance
def test_model_shared_table_equals_per_layer_paths(name, monkeypatch, tol):
    """One table per forward, shared by the layers, gives the loss and gradients of a table
    per layer on the blockwise paths and of SDPA's math backward (the path before this).
    FIRE's threshold lies inside the 40 positions: each layer takes both blockwise paths."""
    torch.manual_seed(0)
    spec = {"name": name, "init_threshold": 20.0}
    model = TransformerLM(64, 32, 3, 4, spec, n_kv_heads=2).double()
    ids = torch.randint(0, 64, (2, 41))
    counted: dict[str, list[int]] = {"bias": [], "block_rows": []}

    def count(method):
        real = getattr(model.encoding, method)
        calls = counted[method]
        monkeypatch.setattr(
            model.encoding, method, lambda *a, **kw: calls.append(1) or real(*a, **kw)
        )

    count("bias")  # the table
    count("block_rows")  # the rows (the table is made of them too)
    shared = _step(model, ids)
    assert [len(c) for c in counted.values()] == [1, 1]  # once per forward, not per layer
    monkeypatch.setattr(shared_module, "shared_bias", lambda *a, **kw: None)
    per_layer = _step(model, ids)
    # per layer: the distance values of the queries before the threshold (a bias of 2·20 - 1
    # keys, itself made of rows) and the rows of the rest
    assert [len(c) for c in counted.values()] == [1 + 3, 1 + 3 * 2]
    monkeypatch.setattr(plan_module, "bias_flash_available", lambda: False)
    sdpa = _step(model, ids)
    rounding = tol(torch.float64, n=20_000, scale=1.0)
    for other in (per_layer, sdpa):
        torch.testing.assert_close(shared[0], other[0], **rounding)
        for n, g in shared[1].items():
            torch.testing.assert_close(
                g,
                other[1][n],
                **tol(torch.float64, n=20_000, scale=g.abs().max().item() + 1e-3),
                msg=n,
            )
    assert all(g.abs().sum() > 0 for n, g in shared[1].items() if n.startswith("encoding"))


def _shared(model, training):
    context = AttentionContext.build(8, 8, 1, torch.device("cpu"))
    shape = AttnShape(1, 4, 4, 8, 8, 8)
    return shared_module.shared_bias(
        model.encoding, context, shape, causal=True, training=training, cached=False
    )


def test_model_without_gradients_computes_no_table():
    model = TransformerLM(64, 32, 2, 4, "fire")
    with torch.no_grad():
        assert _shared(model, training=False) is None
    assert _shared(model, training=True).shape == (4, 8, 8)
    # the shift-invariant biases train on their 2L - 1 distances: no table
    for name in ("alibi", "t5"):
        assert _shared(TransformerLM(64, 32, 2, 4, name), training=True) is None


def test_model_compiles_fullgraph_with_a_bias_encoding(tol):
    """Under torch.compile the blockwise path is off (the old SDPA path runs); the model
    still compiles whole and trains to the same loss."""
    model = TransformerLM(64, 32, 2, 4, "t5")
    ids = torch.randint(0, 64, (2, 17))
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        got = compiled(ids)
        got.square().mean().backward()
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, model(ids), **tol(n=2000, scale=got.abs().max().item()))
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.encoding.parameters())


def test_second_derivative_is_refused():
    """The backward is not differentiable itself: a second derivative raises instead of
    silently missing terms."""
    q, k, v, bias = _inputs(1, 2, 2, 5, 5, 4, torch.float64)
    out = bias_flash_attention(q, k, v, bias, 0.5, True)
    (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match=r"once_differentiable|does not require grad"):
        torch.autograd.grad(gq.sum(), q)


@pytest.mark.parametrize("name", ["t5", "fire"])
def test_model_training_saves_no_batch_by_score_tensor(name, saved_score_tensors):
    """A training forward of TransformerLM keeps nothing of [batch, heads, L, L] (as such or
    as [batch·heads, ...]): the bias is one table per forward (FIRE's MLP keeps its hidden
    units, [L, L, hidden], once), shared by the layers."""
    b, h, n = 3, 4, 48
    model = TransformerLM(64, 32, 2, h, name)
    ids = torch.randint(0, 64, (b, n))
    big, logits = saved_score_tensors(lambda: model(ids), b, h, n)
    assert big == [], big
    logits.sum().backward()
