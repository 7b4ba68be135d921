"""Shaw's attention blockwise (posenc.attn.runners.shaw): against a dense float64 reference
of eqs. 3 and 4 (forward and the gradients of q, k, v and both tables), what it saves, and
auto's use of it when training on the CPU."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc import attention
from posenc.attn import planner
from posenc.attn.runners import shaw as shaw_module
from posenc.attn.runners.shaw import shaw_attention
from posenc.models import TransformerLM


def _reference(q, k, v, a_k, a_v, q_pos, k_pos, max_distance, scale, causal):
    """Eqs. 3 and 4 densely in float64, with ``[q_len, k_len, d]`` gathered tables:
    ``e_ij = q_i · (k_j + a^K_ij) · scale``, ``z_i = Σ_j α_ij (v_j + a^V_ij)``."""
    group = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(group, 1), v.double()
    v = v.repeat_interleave(group, 1)
    rel = k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)  # [(b,) q_len, k_len]
    row = rel.clamp(-max_distance, max_distance) + max_distance
    spec = "ijd" if row.dim() == 2 else "bijd"
    key = torch.einsum(f"bhid,{spec}->bhij", q, a_k.double()[row])
    scores = (q @ k.transpose(-1, -2) + key) * scale
    if causal:
        n = q.shape[2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    p = scores.softmax(-1)
    out = p @ v
    if a_v is not None:
        out = out + torch.einsum(f"bhij,{spec}->bhid", p, a_v.double()[row])
    return out


def _inputs(b, h, kv_h, q_len, k_len, d, rows, dtype, values, table_dtype=None):
    table_dtype = dtype if table_dtype is None else table_dtype
    q = torch.randn(b, h, q_len, d, dtype=dtype, requires_grad=True)
    k = torch.randn(b, kv_h, k_len, d, dtype=dtype, requires_grad=True)
    v = torch.randn(b, kv_h, k_len, d, dtype=dtype, requires_grad=True)
    a_k = torch.randn(rows, d, dtype=table_dtype, requires_grad=True)
    a_v = torch.randn(rows, d, dtype=table_dtype, requires_grad=True) if values else None
    return q, k, v, a_k, a_v


def _grads(out, inputs, grad_out):
    return torch.autograd.grad(out, [t for t in inputs if t is not None], grad_out)


CASES = [
    # b, h, kv_h, q_len, k_len, k, block, q_pos, k_pos (None: arange)
    (2, 4, 4, 70, 70, 5, 64, None, None),  # odd length, two blocks, the last one short
    (3, 4, 2, 37, 37, 3, 16, None, None),  # grouped-query heads, three blocks
    (2, 2, 1, 1, 1, 2, 64, None, None),  # one query
    (2, 2, 2, 45, 45, 40, 8, None, None),  # k near the length: the band is every key
    (1, 2, 2, 30, 30, 0, 8, None, None),  # k = 0: one bin
    (2, 2, 2, 21, 21, 4, 8, "offset", "offset"),  # positions from 100: the same distances
    (2, 2, 1, 19, 19, 4, 8, "batch", "batch"),  # [batch, len] positions, not consecutive
    # queries placed 20 after or before their keys (farther than k): under the causal mask
    # every key a query sees is in one bin, yet the keys after it stay hidden; two blocks of
    # the CPU kernel's forward
    (1, 2, 2, 150, 150, 4, 16, "ahead", None),
    (1, 2, 2, 150, 150, 4, 16, None, "ahead"),
]


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("b", "h", "kv_h", "q_len", "k_len", "kd", "block", "qp", "kp"), CASES)
def test_float64_equals_reference(causal, values, b, h, kv_h, q_len, k_len, kd, block, qp, kp, tol):
    q, k, v, a_k, a_v = _inputs(b, h, kv_h, q_len, k_len, 8, 2 * kd + 1, torch.float64, values)
    positions = {
        None: lambda n: torch.arange(n),
        "offset": lambda n: torch.arange(n) + 100,
        "ahead": lambda n: torch.arange(n) + 20,
        "batch": lambda n: torch.randint(0, 4, (b, n)).cumsum(-1) + torch.arange(n),
    }
    q_pos = positions[qp](q_len)
    k_pos = q_pos if qp == kp else positions[kp](k_len)
    out = shaw_attention(q, k, v, a_k, a_v, kd, q_pos, k_pos, 0.3, causal, block)
    expected = _reference(q, k, v, a_k, a_v, q_pos, k_pos, kd, 0.3, causal)
    # sums of a few hundred terms of size ~10 (scores, softmax, weighted values, their grads)
    rounding = tol(torch.float64, n=8 * (k_len + 8), scale=10.0)
    torch.testing.assert_close(out, expected, **rounding)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    inputs = (q, k, v, a_k, a_v)
    got, want = _grads(out, inputs, grad_out), _grads(expected, inputs, grad_out)
    for name, g, w in zip(["q", "k", "v", "a_k", "a_v"], got, want, strict=False):
        assert g.shape == w.shape, name
        # a table's gradient sums every score of the batch
        n = 8 * (k_len + 8) * (b * h * q_len if name.startswith("a") else 1)
        scale = max(w.abs().max().item(), 1.0)
        torch.testing.assert_close(g, w, **tol(torch.float64, n=n, scale=scale), msg=name)


def test_keys_that_follow_cached_ones(tol):
    """Non-causal queries against more keys, positions shifted against them: the band of
    each block moves with the shift."""
    q, k, v, a_k, a_v = _inputs(2, 2, 2, 20, 50, 8, 7, torch.float64, True)
    q_pos, k_pos = torch.arange(20) + 30, torch.arange(50)
    out = shaw_attention(q, k, v, a_k, a_v, 3, q_pos, k_pos, 0.4, False, 8)
    expected = _reference(q, k, v, a_k, a_v, q_pos, k_pos, 3, 0.4, False)
    torch.testing.assert_close(out, expected, **tol(torch.float64, n=1000, scale=10.0))
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    inputs = (q, k, v, a_k, a_v)
    for g, w in zip(_grads(out, inputs, grad_out), _grads(expected, inputs, grad_out), strict=True):
        torch.testing.assert_close(g, w, **tol(torch.float64, n=200_000, scale=10.0))


@pytest.mark.parametrize("offset", [100, -100])
def test_a_query_far_from_every_key(offset, tol):
    """One query farther than k from all its keys, to either side: no key is in the band
    (the band's mask has no columns), every key in the first or in the last bin."""
    q, k, v, a_k, _ = _inputs(1, 2, 2, 1, 5, 8, 5, torch.float64, False)
    q_pos, k_pos = torch.arange(1) + offset, torch.arange(5)
    out = shaw_attention(q, k, v, a_k, None, 2, q_pos, k_pos, 0.4, False)
    expected = _reference(q, k, v, a_k, None, q_pos, k_pos, 2, 0.4, False)
    torch.testing.assert_close(out, expected, **tol(torch.float64, n=100, scale=10.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
def test_low_precision_within_rounding(dtype, causal, attention_tol, grad_tol, score_size):
    kd, scale = 6, 1 / math.sqrt(16)
    q, k, v, a_k, a_v = _inputs(2, 4, 2, 67, 67, 16, 2 * kd + 1, dtype, True, torch.float32)
    pos = torch.arange(67)
    out = shaw_attention(q, k, v, a_k, a_v, kd, pos, pos, scale, causal)
    assert out.dtype == dtype
    # the reference from float64 leaves: its gradients are not rounded to the inputs' dtype
    wide = [t.detach().double().requires_grad_() for t in (q, k, v, a_k, a_v)]
    expected = _reference(*wide, pos, pos, kd, scale, causal)
    with torch.no_grad():  # the key term as a bias, in float64
        rows = (pos.unsqueeze(0) - pos.unsqueeze(1)).clamp(-kd, kd) + kd
        bias = torch.einsum("bhid,ijd->bhij", q.double(), a_k.double()[rows]) * scale
    a_v_max = a_v.detach().abs().max().item()
    # the key term rounds like a dot product over d besides the scores' own
    rounding = attention_tol(q, k, v, bias=bias, scale=scale, causal=causal, extra_n=16 + 4)
    rounding["atol"] += (2 * 67 + 16) * torch.finfo(torch.float32).eps * a_v_max
    torch.testing.assert_close(out.double(), expected, **rounding)
    grad_out = torch.randn(out.shape, dtype=dtype)
    inputs = (q, k, v, a_k, a_v)
    got, want = _grads(out, inputs, grad_out), _grads(expected, wide, grad_out.double())
    size = score_size(q, k, bias=bias, scale=scale, causal=causal)
    eps = torch.finfo(dtype).eps if dtype != torch.float32 else 0.0
    for name, g, w in zip(["q", "k", "v", "a_k", "a_v"], got, want, strict=True):
        assert g.dtype == (torch.float32 if name.startswith("a") else dtype), name
        rounding = grad_tol(q, k, want, 2 * size)
        rounding["atol"] += eps * w.abs().max().item()  # rounded to the inputs' dtype
        torch.testing.assert_close(
            g.double(), w, **rounding, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_nothing_of_batch_by_scores_is_saved():
    """The forward keeps q, k, v, the tables, the positions, the output and the
    log-sum-exp: nothing of ``[batch, heads, q_len, k_len]``."""
    b, h, n = 3, 4, 96
    q, k, v, a_k, a_v = _inputs(b, h, h, n, n, 8, 9, torch.float32, True)
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    pos = torch.arange(n)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = shaw_attention(q, k, v, a_k, a_v, 4, pos, pos, 0.3, True)
    assert shapes, "nothing saved: the hook did not see the Function"
    assert all(math.prod(s) < b * h * n * n / 8 for s in shapes), shapes
    out.sum().backward()


@pytest.mark.parametrize("values", [False, True])
def test_model_training_saves_no_batch_by_score_tensor(values, saved_score_tensors):
    b, h, n = 3, 4, 48
    model = TransformerLM(64, 32, 2, h, {"name": "shaw", "values": values})
    ids = torch.randint(0, 64, (b, n))
    big, logits = saved_score_tensors(lambda: model(ids), b, h, n)
    assert big == [], big
    logits.sum().backward()


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("causal", [True, False])
def test_auto_takes_it_on_the_cpu(values, causal, monkeypatch, tol):
    """auto runs Shaw blockwise on the CPU, training and at inference, with the result and
    gradients of the math path; not with a padding mask, nor with keys out of index order
    under the causal mask (the older paths)."""
    enc = posenc.create("shaw", n_heads=4, head_dim=8, max_distance=4, values=values).double()
    calls = []
    real = shaw_module.shaw_attention
    monkeypatch.setattr(
        shaw_module, "shaw_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    q, k, v, _, _ = _inputs(2, 4, 2, 41, 41, 8, 1, torch.float64, False)
    params = list(enc.parameters())
    results = []
    for backend in ("auto", "math"):
        out = attention(q, k, v, enc, causal=causal, backend=backend)
        results.append((out, _grads(out, [q, k, v, *params], torch.ones_like(out))))
    assert calls == [1]
    rounding = tol(torch.float64, n=2000, scale=10.0)
    torch.testing.assert_close(results[0][0], results[1][0], **rounding)
    for g, w in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(g, w, **tol(torch.float64, n=200_000, scale=10.0))
    with torch.no_grad():
        attention(q.detach(), k.detach(), v.detach(), enc, causal=causal)
    assert calls == [1, 1]
    pad = torch.ones(2, 41, dtype=torch.bool)
    pad[0, :3] = False
    attention(q, k, v, enc, causal=causal, key_padding_mask=pad)
    attention(q, k, v, enc, causal=causal, q_positions=torch.arange(41).flip(0))
    assert calls == ([1, 1] if causal else [1, 1, 1])  # reversed: not in index order


def test_model_step_equals_the_math_path(monkeypatch, tol):
    """A TransformerLM training step with Shaw's values: the loss and every gradient of the
    blockwise path are those of the math path it replaces."""
    model = TransformerLM(64, 32, 2, 4, {"name": "shaw", "values": True}, n_kv_heads=2).double()
    ids = torch.randint(0, 64, (2, 41))

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    loss, grads = step()
    # not blockwise: the planner without its shaw row takes the math path
    rows = tuple(row for row in planner.ROWS if row is not planner._shaw)
    monkeypatch.setattr(planner, "ROWS", rows)
    ref_loss, ref_grads = step()
    torch.testing.assert_close(loss, ref_loss, **tol(torch.float64, n=20_000, scale=1.0))
    for n, g in grads.items():
        scale = g.abs().max().item() + 1e-3
        torch.testing.assert_close(g, ref_grads[n], **tol(torch.float64, n=20_000, scale=scale))
    assert grads["encoding.value_table"].abs().sum() > 0


def test_bad_input_is_refused():
    q, k, v, a_k, a_v = _inputs(1, 2, 2, 9, 9, 8, 5, torch.float32, True)
    pos = torch.arange(9)
    with pytest.raises(ValueError, match=r"key_table must be \[2 \* max_distance \+ 1, d\]"):
        shaw_attention(q, k, v, a_k, a_v, 3, pos, pos, 0.3, True)
    with pytest.raises(ValueError, match=r"q_positions must be integer \[9\]"):
        shaw_attention(q, k, v, a_k, a_v, 2, pos.float(), pos, 0.3, True)
    with pytest.raises(ValueError, match=r"k_positions must be integer \[9\] or \[1 \| 1, 9\]"):
        shaw_attention(q, k, v, a_k, a_v, 2, pos, torch.arange(18).view(2, 9), 0.3, True)
    with pytest.raises(ValueError, match="causal=True needs q_len == k_len"):
        shaw_attention(q[:, :, :4], k, v, a_k, a_v, 2, pos[:4], pos, 0.3, True)
    with pytest.raises(ValueError, match="block must be an int >= 1"):
        shaw_attention(q, k, v, a_k, a_v, 2, pos, pos, 0.3, False, 0)
    with pytest.raises(ValueError, match=r"multiple of key/value heads"):
        shaw_attention(q, k[:, :1].expand(1, 3, 9, 8), v, a_k, a_v, 2, pos, pos, 0.3, False)
    out = shaw_attention(q, k, v, a_k, a_v, 2, pos, pos, 0.3, True)
    (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match=r"once_differentiable|does not require grad"):
        torch.autograd.grad(gq.sum(), q)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("q_len", "kd"), [(8, 16), (70, 3)])
def test_a_forward_with_no_backward_gives_the_same_bits(causal, q_len, kd):
    """With no gradient to compute the forward builds no autograd node and takes the key
    table's terms kept by the caller (key_terms); one call over the band alone merges no
    parts: the same bits as the forward of a call with a backward."""
    q, k, v, a_k, _ = _inputs(1, 2, 2, q_len, q_len, 8, 2 * kd + 1, torch.float32, False)
    pos = torch.arange(q_len)
    args = (q, k, v, a_k, None, kd, pos, pos, 0.3, causal)
    with_grad = shaw_attention(*args)
    assert with_grad.grad_fn is not None
    with torch.no_grad():
        plain = shaw_attention(*args)
        terms = shaw_module.key_terms(a_k, 0.3)
        kept = shaw_attention(*args, terms=terms)
    assert plain.grad_fn is None
    assert torch.equal(plain, with_grad.detach())
    assert torch.equal(kept, with_grad.detach())
