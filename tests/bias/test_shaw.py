"""Shaw's relative positions: against a naive loop of the paper's equations (keys and
values), properties, every attention backend, and KV-cache decoding."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import posenc
from posenc.bias.shaw import Shaw
from posenc.models import TransformerLM

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="flex backward needs CUDA")


def naive(q, k, v, a_k, a_v, q_pos, k_pos, max_distance, causal):
    """Shaw et al. eqs. 3 and 4 one score at a time, in float64:
    e_ij = q_i · (k_j + a^K_ij) / sqrt(d), z_i = sum_j alpha_ij (v_j + a^V_ij)."""
    q, k, v, a_k = q.double(), k.double(), v.double(), a_k.double()
    batch, heads, q_len, d = q.shape
    group = heads // k.shape[1]
    out = torch.zeros(batch, heads, q_len, d, dtype=torch.float64)
    for b in range(batch):
        qp = q_pos if q_pos.dim() == 1 else q_pos[b]
        kp = k_pos if k_pos.dim() == 1 else k_pos[b]
        for h in range(heads):
            for i in range(q_len):
                e, rows = [], []
                for j in range(k.shape[2]):
                    r = min(max(int(kp[j]) - int(qp[i]), -max_distance), max_distance)
                    rows.append(r + max_distance)
                    e_ij = q[b, h, i] @ (k[b, h // group, j] + a_k[r + max_distance])
                    masked = causal and int(kp[j]) > int(qp[i])
                    e.append(float("-inf") if masked else e_ij / math.sqrt(d))
                alpha = torch.tensor(e, dtype=torch.float64).softmax(0)
                for j, row in enumerate(rows):
                    value = v[b, h // group, j]
                    if a_v is not None:
                        value = value + a_v.double()[row]
                    out[b, h, i] += alpha[j] * value
    return out


def shaw(values=False, max_distance=3, heads=4, head_dim=8):
    """A Shaw encoding with large tables, so that their effect shows."""
    return Shaw(
        n_heads=heads, head_dim=head_dim, max_distance=max_distance, values=values, init_std=1.0
    )


def qkv(b=2, h=4, kv_h=2, q_len=5, k_len=9, d=8):
    return (
        torch.randn(b, h, q_len, d),
        torch.randn(b, kv_h, k_len, d),
        torch.randn(b, kv_h, k_len, d),
    )


def shaw_tol(attention_tol, enc, q, k, v, positions=(None, None), causal=True, scale=None):
    """``attention_tol`` for Shaw (default positions: the queries last): the bias
    q·a^K·scale is a dot product over d (d + 1 roundings of terms up to scale·Σ|q_l a_l|),
    and a^V adds to the values."""
    q_pos, k_pos = positions
    if q_pos is None:
        q_pos, k_pos = torch.arange(k.shape[2] - q.shape[2], k.shape[2]), torch.arange(k.shape[2])
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias = enc.bias(q_pos, k_pos, q=q, scale=scale)
    terms = abs(scale) * q.abs() @ enc.key_table.detach().abs().T  # [b, h, q_len, rows]
    err = (q.shape[-1] + 1) * torch.finfo(torch.float32).eps * terms.max().item()
    allowed = None
    if causal:
        allowed = k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1)  # [(b,) q_len, k_len]
        allowed = allowed.unsqueeze(1) if allowed.dim() == 3 else allowed
    value_size = enc.value_table.detach().abs().max().item() if enc.config.values else 0.0
    return attention_tol(
        q, k, v, bias, scale, allowed=allowed, score_err=err, value_size=value_size
    )


# against the paper --------------------------------------------------------------------------


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_matches_the_papers_equations(causal, values, attention_tol):
    enc = shaw(values)
    q, k, v = qkv()
    a_v = enc.value_table if values else None
    with torch.no_grad():
        # default layout: the queries are the last 5 of 9 positions (k up to 8 away)
        expected = naive(
            q, k, v, enc.key_table, a_v, torch.arange(4, 9), torch.arange(9), 3, causal
        )
        out = posenc.attention(q, k, v, encoding=enc, causal=causal)
        rounding = shaw_tol(attention_tol, enc, q, k, v, causal=causal)
        assert_close(out.double(), expected, **rounding)
        # explicit per-batch positions with gaps (packed or left-padded rows)
        q_pos = torch.tensor([[4, 6, 9, 10, 11], [2, 3, 7, 8, 20]])
        k_pos = torch.tensor([[0, 1, 2, 4, 6, 9, 10, 11, 12], [0, 2, 3, 5, 7, 8, 13, 19, 20]])
        expected = naive(q, k, v, enc.key_table, a_v, q_pos, k_pos, 3, causal)
        out = posenc.attention(q, k, v, enc, q_positions=q_pos, k_positions=k_pos, causal=causal)
        rounding = shaw_tol(attention_tol, enc, q, k, v, (q_pos, k_pos), causal)
        assert_close(out.double(), expected, **rounding)


def test_bias_is_the_key_term_with_its_sign_convention():
    enc = shaw(max_distance=2, heads=1, head_dim=5)
    with torch.no_grad():
        enc.key_table.copy_(torch.eye(5))  # row r + k picks coordinate r + k of q
    q = torch.arange(1.0, 6.0).view(1, 1, 1, 5)  # one query at position 5
    bias = enc.bias(torch.tensor([5]), torch.arange(9), q=q, scale=1.0)
    # keys at 0..9: distance j - i = -5..3, clipped to -2..2 -> rows 0..4 -> q values 1..5
    # (a one-hot table: each bias is one q value times 1, plus zeros: exact)
    assert_close(bias, torch.tensor([[[[1.0, 1, 1, 1, 2, 3, 4, 5, 5]]]]), rtol=0, atol=0)
    assert_close(enc.bias(torch.tensor([5]), torch.arange(9), q=q), bias / math.sqrt(5))


def test_the_key_term_follows_the_attention_scale(attention_tol):
    """e_ij = q_i · (k_j + a^K_ij) * scale: the relative term takes the scores' scale."""
    enc = shaw()
    q, k, v = qkv()
    with torch.no_grad():
        expected = naive(
            q * 3.0, k, v, enc.key_table, None, torch.arange(4, 9), torch.arange(9), 3, True
        )
        rounding = shaw_tol(attention_tol, enc, q, k, v, scale=3.0 / math.sqrt(8))
        for backend in ("sdpa", "math"):
            out = posenc.attention(q, k, v, encoding=enc, scale=3.0 / math.sqrt(8), backend=backend)
            assert_close(out.double(), expected, **rounding)


def test_value_term_matches_a_loop(tol):
    enc = shaw(values=True)
    probs = torch.rand(2, 4, 3, 7).softmax(-1)
    q_pos, k_pos = torch.tensor([1, 5, 6]), torch.arange(7)
    expected = torch.zeros(2, 4, 3, 8)
    for i, qp in enumerate(q_pos.tolist()):
        for j, kp in enumerate(k_pos.tolist()):
            row = min(max(kp - qp, -3), 3) + 3
            expected[:, :, i] += probs[:, :, i, j, None] * enc.value_table[row]
    # a sum over 7 keys of p·a^V, Σ p = 1: terms up to max|a^V| in all
    rounding = tol(n=7 + 1, scale=enc.value_table.abs().max().item())
    assert_close(enc.value_term(probs, q_pos, k_pos), expected, **rounding)


# properties ---------------------------------------------------------------------------------


@given(shift=st.integers(0, 1000), max_distance=st.integers(0, 6))
def test_bias_depends_only_on_clipped_distance(shift, max_distance):
    enc = shaw(max_distance=max_distance)
    q = torch.randn(1, 4, 4, 8)
    q_pos, k_pos = torch.tensor([0, 2, 3, 9]), torch.arange(10)
    bias = enc.bias(q_pos, k_pos, q=q)
    # q · a^K for each table row, then a lookup by the clipped distance: copies
    assert_close(enc.bias(q_pos + shift, k_pos + shift, q=q), bias, rtol=0, atol=0)
    far = (k_pos[None] - q_pos[:, None]).clamp(-max_distance, max_distance)  # [q, k]
    for i in range(4):  # same clipped distance, same bias
        for j in range(10):
            same = far[i] == far[i, j]
            assert torch.equal(
                bias[0, :, i, same], bias[0, :, i, j, None].expand(-1, int(same.sum()))
            )


def test_max_distance_zero_without_values_is_plain_attention(attention_tol):
    """With k = 0 the key term is q_i · a^K_0 for every key: a row constant, which the
    softmax ignores (but for the rounding of scores the constant makes larger)."""
    enc = shaw(max_distance=0)
    q, k, v = qkv()
    with torch.no_grad():
        rounding = shaw_tol(attention_tol, enc, q, k, v)
        assert_close(posenc.attention(q, k, v, encoding=enc), posenc.attention(q, k, v), **rounding)


# backends -----------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("flex", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_flex_sdpa_math_agree(causal, flex, attention_tol, backends):
    """SDPA against math; flex against math in ``make test-slow`` (a compile of Shaw's
    score_mod takes half a minute on a cold inductor cache)."""
    if flex and "flex" not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    backends = ("flex", "math") if flex else tuple(b for b in backends if b != "flex")
    enc = shaw()
    q, k, v = qkv()
    q_pos = torch.tensor([[4, 6, 9, 10, 11], [2, 3, 7, 8, 20]])
    k_pos = torch.tensor([[0, 1, 2, 4, 6, 9, 10, 11, 12], [0, 2, 3, 5, 7, 8, 13, 19, 20]])
    with torch.no_grad():
        for positions in [(None, None)] + ([(q_pos, k_pos)] if not causal else []):
            given = dict(zip(("q_positions", "k_positions"), positions, strict=True))
            outs = {
                backend: posenc.attention(q, k, v, enc, **given, causal=causal, backend=backend)
                for backend in backends
            }
            # each within the bound of the exact result: at most twice it apart
            bound = 2 * shaw_tol(attention_tol, enc, q, k, v, positions, causal)["atol"]
            for backend in backends:
                assert_close(outs[backend], outs["math"], atol=bound, rtol=0, msg=backend)


def test_gradients_agree_between_sdpa_and_math(grad_tol, score_size):
    enc = shaw()
    inputs = qkv()
    grads = {}
    for backend in ("sdpa", "math"):
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        out = posenc.attention(q, k, v, encoding=enc, backend=backend)
        grads[backend] = torch.autograd.grad(out.sin().sum(), (q, k, v, enc.key_table))
    q, k, _ = inputs
    bias = enc.bias(torch.arange(4, 9), torch.arange(9), q=q)
    rounding = grad_tol(q, k, grads["math"], score_size(q, k, bias, causal=True))
    for got, expected in zip(grads["sdpa"], grads["math"], strict=True):
        assert_close(got, expected, **rounding)


@pytest.mark.filterwarnings("ignore:.*flex_attention.*")
def test_score_mod_carries_gradients_into_the_table(attention_tol, grad_tol, score_size):
    """Flex attention's own (eager) autograd differentiates the score_mod: the gradient
    reaches ``key_table`` through the captured ``q · a^Kᵀ``. Compiled flex has no backward
    on the CPU (see the CUDA test below)."""
    from torch.nn.attention.flex_attention import flex_attention

    enc = shaw()
    q, k, v = qkv(kv_h=4)
    out = flex_attention(q, k, v, score_mod=enc.score_mod(q=q, q_offset=4))
    (grad,) = torch.autograd.grad(out.sin().sum(), enc.key_table)
    out_math = posenc.attention(q, k, v, encoding=enc, causal=False, backend="math")
    (expected,) = torch.autograd.grad(out_math.sin().sum(), enc.key_table)
    # each within the bound of the exact result: at most twice it apart
    bound = 2 * shaw_tol(attention_tol, enc, q, k, v, causal=False)["atol"]
    assert_close(out, out_math, atol=bound, rtol=0)
    bias = enc.bias(torch.arange(4, 9), torch.arange(9), q=q)
    assert_close(grad, expected, **grad_tol(q, k, [expected], score_size(q, k, bias)))


@needs_cuda
@pytest.mark.parametrize("causal", [True, False])
def test_flex_gradients_match_math_on_cuda(causal):
    enc = shaw().cuda()
    inputs = qkv()
    grads = {}
    for backend in ("flex", "math"):
        q, k, v = (t.cuda().requires_grad_() for t in inputs)
        out = posenc.attention(q, k, v, encoding=enc, causal=causal, backend=backend)
        grads[backend] = (out, *torch.autograd.grad(out.sin().sum(), (q, k, v, enc.key_table)))
    for got, expected in zip(grads["flex"], grads["math"], strict=True):
        assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_values_need_the_math_path():
    enc = shaw(values=True)
    assert enc.adds_to_values and not shaw().adds_to_values
    q, k, v = qkv()
    for backend in ("flex", "sdpa"):
        with pytest.raises(ValueError, match="only backend='math'"):
            posenc.attention(q, k, v, encoding=enc, backend=backend)
    q, k, v = (t.requires_grad_() for t in qkv())
    out = posenc.attention(q, k, v, encoding=enc)
    grads = torch.autograd.grad(out.sum(), (enc.key_table, enc.value_table))
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


# errors and configuration -------------------------------------------------------------------


def test_needs_q_and_says_so():
    enc = shaw()
    positions = torch.arange(4)
    with pytest.raises(TypeError, match="depends on the queries"):
        enc.bias(positions, positions)
    with pytest.raises(TypeError, match="depends on the queries"):
        enc.bias_at(torch.tensor(0), positions, positions)
    with pytest.raises(TypeError, match="depends on the queries"):
        enc.score_mod()
    with pytest.raises(ValueError, match="head_dim=8"):
        enc.bias(positions, positions, q=torch.randn(1, 4, 4, 16))
    with pytest.raises(ValueError, match="heads=4"):
        enc.bias(positions, positions, q=torch.randn(1, 2, 4, 8))
    with pytest.raises(TypeError, match="integer tensor"):
        enc.bias(positions.float(), positions, q=torch.randn(1, 4, 4, 8))
    with pytest.raises(ValueError, match="values=True"):
        enc.value_term(torch.rand(1, 4, 4, 4), positions, positions)


def test_config():
    enc = posenc.create("shaw", n_heads=4, head_dim=8)
    assert enc.key_table.shape == (33, 8) and enc.value_table is None
    assert set(enc.state_dict()) == {"key_table"}
    assert set(shaw(values=True).state_dict()) == {"key_table", "value_table"}
    with pytest.raises(ValueError, match=r"missing required config key\(s\) \['head_dim'\]"):
        posenc.create("shaw", n_heads=4)
    with pytest.raises(ValueError, match="max_distance must be >= 0"):
        posenc.create("shaw", n_heads=4, head_dim=8, max_distance=-1)
    with pytest.raises(TypeError, match="values must be a bool"):
        posenc.create("shaw", n_heads=4, head_dim=8, values="yes")
    meta = Shaw(n_heads=4, head_dim=8, values=True, device="meta")
    assert meta.key_table.is_meta and meta.value_table.is_meta


# the model ----------------------------------------------------------------------------------


def test_a_model_with_another_head_dim_is_refused():
    with pytest.raises(ValueError, match="has head_dim=16 but the model needs head_dim=8"):
        TransformerLM(37, 32, 1, 4, encoding=Shaw(n_heads=4, head_dim=16))


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_cached_generation_equals_recomputation(values, n_kv_heads, sharpen, check_cached_decoding):
    encoding = {"name": "shaw", "max_distance": 3, "values": values}
    model = TransformerLM(37, 32, 2, 4, encoding=encoding, n_kv_heads=n_kv_heads).eval()
    assert model.encoding.config.head_dim == 8  # filled in by the model, with n_heads
    with torch.no_grad():
        model.encoding.key_table.normal_()
        if values:
            model.encoding.value_table.normal_()
    cached, full = check_cached_decoding(sharpen(model), torch.randint(0, 37, (2, 5)), 10)
    with torch.no_grad():
        model.encoding.key_table.zero_()  # the encoding matters: without it the logits change
        assert not torch.allclose(model(cached), full, atol=1e-3)
