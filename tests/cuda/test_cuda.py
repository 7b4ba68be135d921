"""posenc on a CUDA device, against the CPU: every encoding's TransformerLM forward and
backward, every bias encoding through flex and ``auto``, cached decoding, one compiled
training step, and a forward that creates no tensor on the host.

Every test is marked ``cuda`` and skipped without a CUDA device, so ``make test`` skips
them all; ``scripts/gpu_check.py`` runs them (``pytest -m cuda tests/cuda``) on a machine
with a GPU. A model is built on the CPU and deep-copied to the device, so both sides hold
the same weights; fp32 matmuls run in IEEE fp32 on the device (no TF32), so the two sides
differ by the order of their sums only, and the tolerances are the rounding bounds of the
suite's conftest (``model_tol``, ``attention_tol``, ``grad_tol``), doubled where both sides
are compared with one float64 reference.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from tests.attn.test_backends import CASES, SCALE, grads, qkv
from torch.testing import assert_close

import posenc
from posenc.attn.runners import RUNNERS
from posenc.base import RelativeTables
from posenc.functional.fox import forget_bias
from posenc.models import TransformerLM

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

EPS = torch.finfo(torch.float32).eps
#: every encoding a causal language model of tokens takes (not the image-grid ones)
MODEL_NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
VOCAB, DIM, LAYERS, HEADS = 37, 32, 2, 4
BATCH, SEQ, PADS = 2, 9, 3


def tiny_model(name, sharpen):
    """A 2-layer model of ``name`` on the CPU, attention sharpened and the encoding's own
    parameters moved off their (often zero) initial values, so a wrong position shows."""
    model = sharpen(
        TransformerLM(vocab_size=VOCAB, dim=DIM, n_layers=LAYERS, n_heads=HEADS, encoding=name)
    )
    with torch.no_grad():
        for enc in model.encodings:
            for p in enc.parameters():
                p.mul_(torch.empty_like(p).uniform_(0.5, 1.5)).add_(
                    torch.empty_like(p).uniform_(0.05, 0.2)
                )
    return model


def padding_mask(padded):
    """``[BATCH, SEQ]``: the first row left-padded by ``PADS`` tokens, or None."""
    if not padded:
        return None
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, :PADS] = 0
    return mask


def model_grad_tol(model, seq_len, grads_):
    """Gradients of the model's parameters computed two ways. The backward runs the forward's
    chain of sums again (``model_tol``'s count, twice), and a weight's gradient sums over
    the ``batch·seq`` tokens besides; the largest gradient stands for the size of the terms
    (an estimate, as conftest's ``_grad_tol``: a gradient of terms that cancel is smaller)."""
    hidden = model.blocks[0].mlp[0].out_features
    per_layer = 4 * model.dim + hidden + model.head_dim + 2 * seq_len
    n = 2 * (model.n_layers * per_layer + 2 * model.dim) + BATCH * seq_len
    scale = max(g.abs().max().item() for g in grads_)
    return {"atol": n * EPS * scale, "rtol": n * EPS}


# 1. every encoding in a TransformerLM: forward and backward on the device = on the CPU ------


@pytest.mark.parametrize("padded", [False, True], ids=["full", "left-padded"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_forward_backward_matches_cpu(name, padded, sharpen, model_tol):
    cpu = tiny_model(name, sharpen)
    gpu = copy.deepcopy(cpu).to("cuda")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    mask = padding_mask(padded)
    real = torch.ones(BATCH, SEQ, dtype=torch.bool) if mask is None else mask.bool()
    weight = torch.randn(int(real.sum()), VOCAB)  # a linear loss of the real tokens' logits

    def run(model, device):
        logits = model(ids.to(device), attention_mask=None if mask is None else mask.to(device))
        (logits[real.to(device)] * weight.to(device)).sum().backward()
        return logits.detach().cpu()

    expected, got = run(cpu, "cpu"), run(gpu, "cuda")
    assert expected[real].isfinite().all(), "the CPU reference is not finite"
    assert_close(got[real], expected[real], **model_tol(cpu, SEQ, expected[real]))
    named = [(n, p.grad) for n, p in cpu.named_parameters() if p.grad is not None]
    rounding = model_grad_tol(cpu, SEQ, [g for _, g in named])
    on_device = dict(gpu.named_parameters())
    for n, g in named:
        assert on_device[n].grad is not None, f"{n}: no gradient on the device"
        assert_close(on_device[n].grad.cpu(), g, **rounding, msg=n)


# 2. every bias encoding through posenc.attention: flex and auto on the device = math on CPU --


def _attention_and_grads(enc, q, k, v, backend, bias=None):
    """``(out, grads)`` on the CPU: the gradients into q, k, v and the encoding's
    parameters, or, with the table ``bias`` given (FoX's clock), into q, k, v and it."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    if bias is None:
        leaves += enc.parameters()
    else:
        leaves.append(bias.detach().requires_grad_())
    table = None if bias is None else leaves[3]
    out = posenc.attention(*leaves[:3], enc, backend=backend, bias=table)
    found = grads(out, leaves)
    return out.detach().cpu(), [g.cpu() for g in found]


def _on_device(*tensors):
    return [t.to("cuda") for t in tensors]


@pytest.mark.parametrize("backend", ["flex", "auto"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bias_attention_matches_cpu(case, backend, attention_tol, score_size, grad_tol):
    """24 queries after 16 cached keys, grouped keys, causal: the output and the gradients
    into q, k, v and every parameter, on the device, equal the CPU's math path."""
    made = CASES[case]
    enc = made.make()
    if backend == "flex" and isinstance(enc, RelativeTables) and enc.adds_to_values:
        pytest.skip("adds to the values: only the math path runs it")
    q, k, v = qkv(24, 40)
    if backend == "flex" and not enc.flex_backward:  # FIRE: refused, with the way out
        with pytest.raises(ValueError, match="cannot differentiate"):
            _attention_and_grads(copy.deepcopy(enc).cuda(), *_on_device(q, k, v), backend)
        return
    expected, expected_grads = _attention_and_grads(enc, q, k, v, "math")
    got, got_grads = _attention_and_grads(copy.deepcopy(enc).cuda(), *_on_device(q, k, v), backend)
    bias = made.exact(enc, torch.arange(16, 40), torch.arange(40), q)
    rounding = attention_tol(q, k, v, bias, causal=True, score_err=made.bias_err(enc, bias, q))
    # both off the float64 attention by at most the bound: twice it apart
    assert_close(got, expected, atol=2 * rounding["atol"], rtol=0)
    size = score_size(q, k, bias, scale=SCALE, causal=True)
    g_rounding = grad_tol(q, k, expected_grads, size)
    for g, e in zip(got_grads, expected_grads, strict=True):
        assert_close(g, e, **g_rounding)


@pytest.mark.parametrize("case", sorted(CASES))
def test_auto_runs_flex_on_cuda(case, monkeypatch, attention_tol):
    """At 256 x 256 scores per head (the planner's ``FLEX_MIN_SCORES``) ``auto`` picks flex
    on the device, with no CPU-only runner on the way, and equals the CPU's math path."""
    made = CASES[case]
    enc = made.make()
    ran = []
    for name, runner in list(RUNNERS.items()):
        monkeypatch.setitem(RUNNERS, name, lambda *a, _n=name, _r=runner: ran.append(_n) or _r(*a))
    q, k, v = torch.randn(3, 1, HEADS, 256, 16).unbind()
    with torch.no_grad():
        expected = posenc.attention(q, k, v, enc, backend="math")
        ran.clear()
        got = posenc.attention(*_on_device(q, k, v), copy.deepcopy(enc).cuda()).cpu()
    bias = made.exact(enc, torch.arange(256), torch.arange(256), q)
    rounding = attention_tol(q, k, v, bias, causal=True, score_err=made.bias_err(enc, bias, q))
    assert_close(got, expected, atol=2 * rounding["atol"], rtol=0)
    if isinstance(enc, RelativeTables) and enc.adds_to_values:
        assert ran == ["math"], ran
    else:
        assert ran == ["flex"], f"auto ran {ran} on CUDA"


@pytest.mark.parametrize("backend", ["flex", "auto"])
def test_fox_attention_matches_cpu(backend, attention_tol, score_size, grad_tol):
    """FoX's forget bias (its clock from the layer's input) on the device = math on CPU."""
    enc = posenc.create("fox", n_heads=HEADS, dim=12)
    q, k, v = qkv(24, 40)
    x = torch.randn(2, 40, 12)
    clock = enc.clock(x).detach()
    expected, expected_grads = _attention_and_grads(enc, q, k, v, "math", bias=clock)
    gpu = copy.deepcopy(enc).cuda()
    got, got_grads = _attention_and_grads(gpu, *_on_device(q, k, v), backend, bias=clock.to("cuda"))
    bias = forget_bias(clock[..., 16:], clock).double()
    score_err = 4 * EPS * clock.abs().max().item()  # m - c_j and the scale: a few roundings
    rounding = attention_tol(q, k, v, bias=bias, causal=True, score_err=score_err)
    assert_close(got, expected, atol=2 * rounding["atol"], rtol=0)
    g_rounding = grad_tol(q, k, expected_grads, score_size(q, k, bias, causal=True))
    for g, e in zip(got_grads, expected_grads, strict=True):
        assert_close(g, e, **g_rounding)


def test_cope_attention_matches_cpu(attention_tol):
    """CoPE reads the scores: flex refuses it on every device; ``auto`` on the device equals
    math on the CPU (its bias: a dot product of d over two table rows picked by a sum of
    ``k_len`` float32 gates, as tests/bias/test_cope.py bounds it)."""
    d = 8
    enc = posenc.create("cope", n_heads=HEADS, head_dim=d, max_pos=5, init_std=1.0)
    q = torch.randn(2, HEADS, 24, d)
    k, v = torch.randn(2, 2, 40, d), torch.randn(2, 2, 40, d)
    gpu = copy.deepcopy(enc).cuda()
    with pytest.raises(ValueError, match="only backend='auto' or 'math'"):
        posenc.attention(*_on_device(q, k, v), gpu, backend="flex")
    with torch.no_grad():
        expected = posenc.attention(q, k, v, enc, backend="math")
        got = posenc.attention(*_on_device(q, k, v), gpu).cpu()
    size = (q.abs().sum(-1).max() * enc.table.abs().max()).item()
    err = (d + 8 + 40) * EPS * size
    rounding = attention_tol(q, k, v, causal=True, score_err=err)
    assert_close(got, expected, atol=2 * rounding["atol"], rtol=0)


def test_dca_attention_matches_cpu(attention_tol):
    """Dual Chunk Attention over five chunks: SDPA by chunks (``auto``) and the explicit
    softmax by rows (``math``) on the device equal the CPU's explicit softmax; the joined
    3·d-wide heads carry zeros beyond each region's d channels, so a score is a sum of d
    products as in plain attention."""
    enc = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = torch.randn(3, 2, HEADS, 40, 16).unbind()
    rounding = attention_tol(q, k, v, causal=True)
    with torch.no_grad():
        expected = posenc.attention(q, k, v, enc, backend="math")
        for backend in ("auto", "math"):
            got = posenc.attention(*_on_device(q, k, v), enc, backend=backend).cpu()
            assert_close(got, expected, atol=2 * rounding["atol"], rtol=0)


# 3. cached decoding on the device: the CPU's tokens -----------------------------------------


@pytest.mark.parametrize("padded", [False, True], ids=["full", "left-padded"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_cached_decoding_matches_cpu(name, padded, sharpen, model_tol, check_cached_decoding):
    """Greedy tokens with the KV cache on the device equal the CPU's; on the device, cached
    steps equal one forward (conftest's ``check_cached_decoding``, without padding). Tokens
    may part only where two logits tie within rounding, which is checked, not assumed."""
    cpu = tiny_model(name, sharpen).eval()
    gpu = copy.deepcopy(cpu).to("cuda")
    prompt = torch.randint(0, VOCAB, (BATCH, 5))
    mask = None
    if padded:
        mask = torch.ones(BATCH, 5, dtype=torch.long)
        mask[0, :2] = 0
    new = 6
    expected = cpu.generate(prompt, new, attention_mask=mask)
    got = gpu.generate(
        prompt.cuda(), new, attention_mask=None if mask is None else mask.cuda()
    ).cpu()
    if not torch.equal(got, expected):
        at = int((got != expected).any(0).nonzero()[0])  # the first step where they part
        full_mask = None if mask is None else F.pad(mask, (0, at - 5), value=1)
        with torch.no_grad():
            logits = cpu(expected[:, :at], attention_mask=full_mask)[:, -1]
        top2 = logits.topk(2, dim=-1).values
        parted = got[:, at] != expected[:, at]
        gap = (top2[parted, 0] - top2[parted, 1]).max().item()
        rounding = model_tol(cpu, at, logits)
        assert gap <= rounding["atol"] + rounding["rtol"] * top2.abs().max().item(), (
            f"tokens part at {at} with a logit gap of {gap}: {got.tolist()} != {expected.tolist()}"
        )
    if not padded:
        check_cached_decoding(gpu, prompt.cuda(), new)


# 4. one compiled training step on the device = the eager one -------------------------------


@pytest.mark.parametrize("name", ["rope", "alibi", "nope"])
def test_compiled_training_step_matches_eager(name, sharpen):
    """``torch.compile(model)``: the loss, every gradient and every parameter after one SGD
    step equal eager's on the device (inductor reorders and fuses the same fp32 sums)."""
    eager = tiny_model(name, sharpen).to("cuda")
    compiled = copy.deepcopy(eager)
    ids = torch.randint(0, VOCAB, (BATCH, 17), device="cuda")
    lr = 0.1

    def step(model, forward):
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        logits = forward(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    loss, expected = step(eager, eager)
    got_loss, got = step(compiled, torch.compile(compiled))
    grads_ = [g for g in expected.values() if g is not None]
    rounding = model_grad_tol(eager, 16, grads_)
    # the loss: the logits' rounding (the model's count of sums) through a log-softmax
    assert_close(got_loss, loss, atol=0, rtol=rounding["rtol"])
    for n, g in expected.items():
        if g is None:
            assert got[n] is None, n
            continue
        assert_close(got[n], g, **rounding, msg=n)
    after = dict(eager.named_parameters())
    for n, p in compiled.named_parameters():  # p - lr·g: the gradient's error times lr
        atol = lr * rounding["atol"] + EPS * p.abs().max().item()
        assert_close(p, after[n], atol=atol, rtol=rounding["rtol"], msg=n)


def test_cuda_tests_see_ieee_fp32():
    """The fixture above holds: a float32 matmul on the device keeps the bits TF32 drops.
    ``1 + 2^-12`` rounds to 1 in TF32 (10 bits); in fp32 each product is ``1 + 2^-11``
    (the ``2^-24`` rounds away) and the 64 of a row sum exactly to ``64 + 2^-5``."""
    a = torch.full((64, 64), 1 + 2**-12, device="cuda")
    assert (a @ a)[0, 0].item() == 64 + 2**-5


@pytest.mark.parametrize("name", ["t5", "shaw", "kerple", "alibi"])
def test_flex_compiles_table_encodings_in_bf16(name):
    """At [1, 8, 4096, 64] in bfloat16, inductor's default flex tiles for a score_mod that
    reads tensors needed more shared memory than an H200 has (no valid triton config, torch
    2.11); the flex runner's tiles compile there, and the output is SDPA's on the
    materialised bias within bfloat16 rounding (8 bits: a few units of 2^-8 on values of
    order 1)."""
    extra = {"head_dim": 64} if name == "shaw" else {}
    enc = posenc.create(name, n_heads=8, **extra).cuda()
    q, k, v = torch.randn(3, 1, 8, 4096, 64, device="cuda", dtype=torch.bfloat16).unbind()
    with torch.no_grad():
        got = posenc.attention(q, k, v, enc, backend="flex")
        expected = posenc.attention(q, k, v, enc, backend="math")
    assert_close(got, expected, atol=4 * 2**-8, rtol=2**-7)
