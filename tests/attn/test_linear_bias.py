"""The fused SDPA path for biases linear in the distance (ALiBi on the CPU): against a
float64 reference and the math path (forward and gradients), its query blocks and SDPA runs,
and where it declines."""

import math

import pytest
import torch

import posenc
from posenc.attn.planner import AttnShape, plan_bias
from posenc.attn.runners.linear import linear_bias_blocks, linear_bias_runs, linear_bias_sdpa
from posenc.functional.alibi import alibi_slopes
from posenc.positions import AttnPositions


def fused_linear_bias(enc, q, k, v, q_pos, k_pos, causal, scale):
    """The fused path where plan_bias gives it to these inputs (as auto does), else None."""
    positions = AttnPositions.build(q.shape[2], k.shape[2], q.shape[0], q_pos.device, q_pos, k_pos)
    needs_grad = any(t.requires_grad for t in (q, k, v))
    plan = plan_bias(
        enc,
        AttnShape.of(q, k),
        positions,
        masked=False,
        causal=causal,
        needs_grad=needs_grad,
        device=q.device,
    )
    if plan.runner != "linear":
        return None
    return linear_bias_sdpa(
        q, k, v, plan.slopes, positions.q, positions.k, causal, scale, plan.blocks
    )


def reference(q, k, v, slopes, q_pos, k_pos, causal=True, symmetric=False, scale=None):
    """softmax(q kᵀ · scale + bias) v in float64, the bias never scaled."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    distance = (q_pos.double().unsqueeze(-1) - k_pos.double().unsqueeze(-2)).unsqueeze(-3)
    m = torch.as_tensor(slopes, dtype=torch.float64).view(-1, 1, 1)
    bias = -m * (distance.abs() if symmetric else distance)  # [(b,) h, q_len, k_len]
    scores = q.double() @ k.transpose(-1, -2) * scale + bias
    if causal:
        scores = scores.masked_fill(distance < 0, -math.inf)
    return scores.softmax(-1) @ v


def qkv(b=2, h=8, kv_h=8, lq=40, lk=40, d=16, dtype=torch.float32):
    """q, k, v requiring grad: ``[b, h, lq, d]``, ``[b, kv_h, lk, d]`` twice."""
    return tuple(
        torch.randn(b, n, s, d, dtype=dtype).requires_grad_()
        for n, s in ((h, lq), (kv_h, lk), (kv_h, lk))
    )


def grads(out, inputs, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad((out.double() * g.double()).sum(), inputs)


def scores_of(slopes, q_pos, k_pos, causal=True, symmetric=False):
    """The bias and the causal mask of :func:`reference`, for the tolerance helpers."""
    distance = (q_pos.double().unsqueeze(-1) - k_pos.double().unsqueeze(-2)).unsqueeze(-3)
    m = torch.as_tensor(slopes, dtype=torch.float64).view(-1, 1, 1)
    bias = -m * (distance.abs() if symmetric else distance)
    return bias, (distance >= 0) if causal else None


STEEP = [0.01, 16.0, 0.01, 16.0, 0.02, 0.04, 0.08, 0.16]  # blocks of 8 positions on 2 heads


@pytest.mark.parametrize(
    "config, kv_heads, lq, lk, d",
    [
        ({"n_heads": 8}, 8, 40, 40, 16),  # the kernel's own causal mask
        ({"n_heads": 8}, 2, 64, 200, 16),  # GQA, queries after cached keys: a boolean mask
        ({"n_heads": 6, "alibi_heads": 4}, 3, 1, 300, 16),  # decoding: the materialised bias
        ({"n_heads": 8, "slopes": STEEP}, 8, 256, 256, 64),  # two runs, shuffled head order
        ({"n_heads": 8, "symmetric": True}, 4, 48, 48, 16),  # equal to the causal form here
    ],
)
def test_fused_equals_math_forward_and_gradients(
    config, kv_heads, lq, lk, d, attention_tol, grad_tol, score_size
):
    enc = posenc.create("alibi", **config)
    q, k, v = qkv(h=config["n_heads"], kv_h=kv_heads, lq=lq, lk=lk, d=d)
    q_pos, k_pos = torch.arange(lk - lq, lk), torch.arange(lk)
    fused = fused_linear_bias(enc, q, k, v, q_pos, k_pos, True, 0.3)
    assert fused is not None
    math_out = posenc.attention(q, k, v, enc, causal=True, scale=0.3, backend="math")
    expected = reference(q, k, v, enc.slopes(), q_pos, k_pos, scale=0.3)
    bias, allowed = scores_of(enc.slopes(), q_pos, k_pos)
    rounding = attention_tol(q, k, v, bias, scale=0.3, allowed=allowed)
    torch.testing.assert_close(fused.double(), expected, **rounding)
    # each within the bound of the exact result: at most twice it apart
    torch.testing.assert_close(fused, math_out, atol=2 * rounding["atol"], rtol=0)
    # auto takes this same fused path on the same inputs given as explicit positions (over
    # the default ones with q_len == k_len it takes the distances: test_bias_blocks.py)
    auto = posenc.attention(q, k, v, enc, scale=0.3, q_positions=q_pos, k_positions=k_pos)
    torch.testing.assert_close(auto, fused, rtol=0, atol=0)
    want = grads(math_out, (q, k, v))
    size = score_size(q, k, bias, scale=0.3, allowed=allowed)
    for got, ref in zip(grads(fused, (q, k, v)), want, strict=True):
        torch.testing.assert_close(got, ref, **grad_tol(q, k, want, size))


def test_fused_with_batched_positions_and_bidirectional_causal_form(attention_tol):
    enc = posenc.create("alibi", n_heads=4)
    q, k, v = qkv(h=4, kv_h=2, lq=48, lk=48)
    positions = torch.stack((torch.arange(48), torch.arange(48) * 2 + 7))  # [batch, seq]
    for causal in (True, False):
        out = posenc.attention(
            q, k, v, enc, q_positions=positions, k_positions=positions, causal=causal
        )
        expected = reference(q, k, v, enc.slopes(), positions, positions, causal=causal)
        bias, allowed = scores_of(enc.slopes(), positions, positions, causal)
        rounding = attention_tol(q, k, v, bias, allowed=allowed)
        torch.testing.assert_close(out.double(), expected, **rounding)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_half_precision_is_float32_math_rounded_once(dtype, tol, attention_tol):
    """Both paths compute in float32 and round the output once: one ulp apart (eps·|out|,
    2^-7 for bfloat16, 2^-10 for float16 relative) where their float32 results straddle a
    rounding boundary. CPU flash attention also rounds the weights p to the input dtype
    before the weighted sum of v: off by eps/2·Σ p|v| <= eps/2·max|v| besides."""
    enc = posenc.create("alibi", n_heads=8)
    for lq in (64, 1):  # extended q, k, v; the materialised bias (decoding)
        q, k, v = (t.detach().to(dtype) for t in qkv(lq=lq, lk=64, kv_h=4))
        q_pos, k_pos = torch.arange(64 - lq, 64), torch.arange(64)
        fused = fused_linear_bias(enc, q, k, v, q_pos, k_pos, True, 0.25)
        assert fused.dtype == dtype
        math_out = posenc.attention(q, k, v, enc, scale=0.25, backend="math")
        bias, allowed = scores_of(enc.slopes(), q_pos, k_pos)
        float32 = attention_tol(q.float(), k.float(), v.float(), bias, 0.25, allowed=allowed)
        weights = tol(dtype, n=0.5, scale=v.abs().max())
        atol = 2 * float32["atol"] + weights["atol"]
        torch.testing.assert_close(fused, math_out, rtol=tol(dtype, n=1)["rtol"], atol=atol)


def test_blocks_keep_float32_exact_where_one_centre_would_not():
    """A steep slope over a long span: one centre rounds the fused scores at m·L/2."""
    slopes = [4.0, 2.0]
    q, k, v = (t.detach() for t in qkv(b=1, h=2, kv_h=2, lq=1024, lk=1024))
    positions = torch.arange(1024)
    expected = reference(q, k, v, slopes, positions, positions)
    blocked = linear_bias_sdpa(q, k, v, slopes, positions, positions)
    one = linear_bias_sdpa(q, k, v, slopes, positions, positions, blocks=[1, 1])
    assert linear_bias_blocks(slopes, 1024) == [32, 16]
    assert (blocked.double() - expected).abs().max() < 1e-5
    assert (one.double() - expected).abs().max() > 1e-5


def test_runs_round_widths_to_multiples_of_8_and_split_at_most_once():
    blocks = linear_bias_blocks(alibi_slopes(8).tolist(), 8192)
    assert blocks == [32, 16, 8, 4, 2, 1, 1, 1]
    assert linear_bias_runs(blocks, 1, 64) == [([0, 1], 32), ([2, 3, 4, 5, 6, 7], 8)]
    assert linear_bias_runs(linear_bias_blocks(alibi_slopes(8).tolist(), 2048), 1, 64) == [
        ([0, 1, 2, 3, 4, 5, 6, 7], 8)
    ]
    # 4 key/value heads of 2 query heads; only kv head 1 needs blocks: 30 -> width 96
    assert linear_bias_runs([0, 0, 30, 0, 0, 0, 0, 0], 2, 64) == [([1], 32), ([0, 2, 3], 0)]
    assert linear_bias_runs([0, 3, 0, 0], 2, 60) == [([0, 1], 4)]  # 60 + 4 = 64: not worth a split


def test_fused_declines_where_it_does_not_apply():
    q, k, v = (t.detach() for t in qkv(h=4, kv_h=4))
    positions = torch.arange(40)
    symmetric = posenc.create("alibi", n_heads=4, symmetric=True)
    assert fused_linear_bias(symmetric, q, k, v, positions, positions, False, 0.25) is None
    assert fused_linear_bias(symmetric, q, k, v, positions, positions, True, 0.25) is not None
    steep = posenc.create("alibi", n_heads=4, slopes=[100.0, 1.0, 1.0, 1.0])  # 1-position blocks
    assert fused_linear_bias(steep, q, k, v, positions, positions, True, 0.25) is None
    meta = [t.to("meta") for t in (q, k, v)]
    assert fused_linear_bias(symmetric, *meta, positions, positions, True, 0.25) is None


def test_user_flush_denormal_setting_is_left_as_it_was():
    """The fused path does not flush denormals (measured: no gain, and the setting reaches
    only the calling thread, not the kernel's worker threads), so either setting survives."""

    def flushing():
        return (torch.tensor(1e-30) * torch.tensor(1e-10)).item() == 0.0

    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    enc = posenc.create("alibi", n_heads=8)
    q, k, v = (t.detach() for t in qkv(lq=64, lk=64))
    try:
        for state in (True, False):
            torch.set_flush_denormal(state)
            posenc.attention(q, k, v, enc)
            assert flushing() == state
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.slow
@pytest.mark.parametrize("length", [2048, 8192])
def test_fused_float32_error_stays_flat_with_length(length):
    enc = posenc.create("alibi", n_heads=8)
    q, k, v = (torch.randn(1, 8, length, 64) for _ in range(3))
    positions = torch.arange(length)
    with torch.no_grad():  # explicit positions: the fused path (default ones take distances)
        out = posenc.attention(q, k, v, enc, q_positions=positions, k_positions=positions)
        for h in range(8):  # one head at a time: a float64 [L, L] score matrix each
            want = reference(
                q[:, h : h + 1],
                k[:, h : h + 1],
                v[:, h : h + 1],
                enc.slopes()[h : h + 1],
                positions,
                positions,
            )
            torch.testing.assert_close(out[:, h : h + 1].double(), want, rtol=1e-5, atol=1e-5)


def test_a_models_layers_share_one_small_call_bias(monkeypatch):
    """A decode step's linear bias (one query) is read by the first layer from the table the
    encoding keeps, and kept on the forward's context for the others: once per step, not
    once per layer, built by no kernel of _small_bias; a table per power of two of keys;
    the tokens are those of the full forward."""
    from posenc.attn.runners import linear as linear_module
    from posenc.models import TransformerLM

    rows, built = [], []
    real_row, real_small = linear_module.last_query_bias, linear_module._small_bias
    monkeypatch.setattr(
        linear_module, "last_query_bias", lambda *a: rows.append(a[2]) or real_row(*a)
    )
    monkeypatch.setattr(
        linear_module, "_small_bias", lambda *a, **k: built.append(1) or real_small(*a, **k)
    )
    torch.manual_seed(0)
    model = TransformerLM(32, 16, 3, 2, "alibi").eval()
    ids = torch.randint(0, 32, (1, 9))
    cache = model.new_cache(1, 9)
    with torch.no_grad():
        model(ids[:, :5], cache=cache)  # as many queries as keys: the distance runner
        steps = [model(ids[:, n : n + 1], cache=cache) for n in range(5, 9)]
        full = model(ids)
    assert rows == [6, 7, 8, 9] and built == []  # a row per step (three layers), none built
    kept = model.encodings[0]._kept().values
    sizes = sorted(key[0][2] for key in kept if key[0][0] == "last_query_bias")
    assert sizes == [8, 16]  # keys 6, 7 and 8 share the table of 8; 9 makes the one of 16
    for n, step in enumerate(steps, start=5):
        torch.testing.assert_close(step[:, -1], full[:, n], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_last_query_row_is_the_built_bias_to_the_bit(dtype):
    """last_query_bias slices the kept table where _small_bias builds the bias of the last
    query over every key at the default positions: the same values, bit for bit."""
    from posenc.attn.runners.linear import _small_bias, last_query_bias

    enc = posenc.create("alibi", n_heads=6)
    slopes = enc.linear_slopes(True)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    for k_len in (1, 2, 3, 31, 32, 33, 700):
        row = last_query_bias(enc, slopes, k_len, work, torch.device("cpu"))
        q_pos, k_pos = torch.arange(k_len - 1, k_len), torch.arange(k_len)
        built = _small_bias(slopes, q_pos, k_pos, True, work)
        assert row.shape == built.shape == (1, 6, 1, k_len) and row.dtype == work
        assert torch.equal(row, built)


def test_context_derived_keeps_by_key_and_inference_mode():
    from posenc.attn.masks import AttentionContext

    ctx = AttentionContext.build(1, 4, 1, torch.device("cpu"))
    first = ctx.derived("k", lambda: torch.ones(2))
    assert ctx.derived("k", lambda: torch.zeros(2)) is first
    assert torch.equal(ctx.derived("other", lambda: torch.zeros(2)), torch.zeros(2))
    with torch.inference_mode():
        inside = ctx.derived("k", lambda: torch.full((2,), 3.0))
    assert inside.is_inference() and not first.is_inference()
