"""The T5 relative bias: buckets and bias against transformers' T5Attention, a naive loop,
properties, every attention backend, and KV-cache decoding."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import posenc
from posenc.bias.t5 import T5Bias
from posenc.functional.t5 import t5_relative_bucket
from posenc.models import TransformerLM

try:
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention
except ImportError:  # pragma: no cover - transformers is a test dependency
    T5Attention = None

needs_hf = pytest.mark.skipif(T5Attention is None, reason="transformers is not installed")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="flex backward needs CUDA")

SETTINGS = [(32, 128), (8, 20), (16, 16), (64, 1000), (10, 7)]  # (num_buckets, max_distance)


def naive_bucket(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's bucket rule for one relative position, in Python integers and floats."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = num_buckets if r > 0 else 0
        d = abs(r)
    else:
        d = max(-r, 0)
    max_exact = num_buckets // 2
    if d < max_exact:
        return offset + d
    ratio = math.log(d / max_exact) / math.log(max_distance / max_exact)
    return offset + min(max_exact + int(ratio * (num_buckets - max_exact)), num_buckets - 1)


def t5_attention(bidirectional: bool) -> "T5Attention":
    config = T5Config(
        d_model=32,
        d_kv=8,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.0,
        is_decoder=not bidirectional,
    )
    config._attn_implementation = "eager"
    return T5Attention(config, has_relative_attention_bias=True, layer_idx=0).eval()


def copy_of(attn: "T5Attention", bidirectional: bool) -> T5Bias:
    enc = T5Bias(n_heads=4, num_buckets=32, max_distance=128, bidirectional=bidirectional)
    with torch.no_grad():
        enc.weight.copy_(attn.relative_attention_bias.weight)
    return enc


# buckets ------------------------------------------------------------------------------------


@needs_hf
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), SETTINGS)
def test_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    if bidirectional and num_buckets % 2:
        pytest.skip("posenc refuses an odd num_buckets when bidirectional")
    relative = torch.arange(-1000, 1001)
    expected = T5Attention._relative_position_bucket(
        relative, bidirectional, num_buckets, max_distance
    )
    got = t5_relative_bucket(relative, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.long
    assert torch.equal(got, expected)
    assert got.min() >= 0 and got.max() == num_buckets - 1
    # the module's table (distances clipped to max_distance) gives the same buckets
    enc = T5Bias(
        n_heads=1, num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional
    )
    index = relative.clamp(-max_distance, max_distance) + max_distance
    assert torch.equal(enc.buckets[index], expected)


def test_buckets_match_the_naive_rule_and_keep_the_sign_convention():
    relative = torch.arange(-300, 301)
    for bidirectional in (True, False):
        expected = [naive_bucket(r, bidirectional, 32, 128) for r in relative.tolist()]
        assert t5_relative_bucket(relative, bidirectional).tolist() == expected
    # relative position = key - query: a key before the query (r < 0) is in the lower half
    buckets = t5_relative_bucket(torch.tensor([-1, 0, 1, -7, 7, -8, -127, -128, -5000]))
    assert buckets.tolist() == [1, 0, 17, 7, 23, 8, 15, 15, 15]
    # causal: every key after the query shares distance 0's bucket
    assert t5_relative_bucket(torch.tensor([5, 0, -1]), bidirectional=False).tolist() == [0, 0, 1]


def test_buckets_are_finite_and_integer_safe_on_int32_scalars():
    """Inside flex attention each argument is a 0-d int32 tensor: no log(0), no NaN."""
    for r in (0, 1, -1, 5000, -5000):
        bucket = t5_relative_bucket(torch.tensor(r, dtype=torch.int32))
        assert bucket.dim() == 0 and bucket.item() == naive_bucket(r, True, 32, 128)
    with pytest.raises(TypeError, match="integer tensor"):
        t5_relative_bucket(torch.tensor([1.5]))
    with pytest.raises(ValueError, match="num_buckets must be even"):
        t5_relative_bucket(torch.tensor([1]), num_buckets=31)
    with pytest.raises(ValueError, match="max_distance must exceed"):
        t5_relative_bucket(torch.tensor([1]), num_buckets=32, max_distance=8)


@given(
    r=st.integers(-10_000, 10_000),
    half=st.integers(2, 64),
    max_distance=st.integers(1, 4000),
)
def test_bucket_properties(r, half, max_distance):
    max_distance = max(max_distance, half // 2 + 1)
    bi = t5_relative_bucket(torch.tensor([r, -r]), True, 2 * half, max_distance)
    uni = t5_relative_bucket(torch.tensor([-abs(r), -abs(r) - 1]), False, half, max_distance)
    # the lower half of the bidirectional buckets is the unidirectional rule with half of them
    assert bi[0 if r <= 0 else 1] == uni[0]
    if r > 0:
        assert bi[0] == half + bi[1]  # keys after the query: the upper half
    assert uni[0] <= uni[1] < half  # monotone in distance
    if abs(r) < half // 2:
        assert uni[0] == abs(r)  # exact buckets
    if abs(r) >= max_distance:
        assert uni[0] == half - 1  # saturates


# the bias -----------------------------------------------------------------------------------


def test_fresh_bias_is_zero_and_config_is_strict():
    enc = posenc.create("t5", n_heads=4)
    assert enc.weight.shape == (32, 4) and not enc.config.bidirectional
    bias = enc.bias(torch.arange(50), torch.arange(60))
    assert_close(bias, torch.zeros(4, 50, 60), rtol=0, atol=0)  # lookups in a zero table
    assert posenc.create("t5", n_heads=4, init_std=0.5).weight.abs().sum() > 0
    with pytest.raises(ValueError, match="num_buckets must be even"):
        posenc.create("t5", n_heads=4, num_buckets=31, bidirectional=True)
    with pytest.raises(ValueError, match="max_distance must exceed"):
        posenc.create("t5", n_heads=4, num_buckets=32, max_distance=16)
    with pytest.raises(TypeError, match="bidirectional must be a bool"):
        posenc.create("t5", n_heads=4, bidirectional=1)
    with pytest.raises(ValueError, match="init_std must be >= 0"):
        posenc.create("t5", n_heads=4, init_std=-1.0)
    with pytest.raises(TypeError, match="positions must be integer"):
        enc.bias(torch.arange(3.0), torch.arange(3))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_bias_matches_a_naive_loop(bidirectional):
    enc = T5Bias(n_heads=3, num_buckets=8, max_distance=10, bidirectional=bidirectional)
    torch.nn.init.normal_(enc.weight)
    q_pos, k_pos = torch.tensor([0, 4, 9, 30]), torch.tensor([2, 3, 5, 17, 29, 40])
    expected = torch.empty(3, 4, 6)
    for h in range(3):
        for i, qp in enumerate(q_pos.tolist()):
            for j, kp in enumerate(k_pos.tolist()):
                expected[h, i, j] = enc.weight[naive_bucket(kp - qp, bidirectional, 8, 10), h]
    assert_close(enc.bias(q_pos, k_pos), expected, rtol=0, atol=0)  # lookups: copies
    batched = enc.bias(torch.stack((q_pos, q_pos + 3)), torch.stack((k_pos, k_pos + 3)))
    assert_close(batched, expected.expand(2, 3, 4, 6), rtol=0, atol=0)  # shift-invariant


@needs_hf
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bias_matches_t5_compute_bias(bidirectional):
    attn = t5_attention(bidirectional)
    enc = copy_of(attn, bidirectional)
    with torch.no_grad():
        # lookups in the same table, by buckets equal to T5's (see the bucket tests)
        expected = attn.compute_bias(12, 12)[0]  # [h, q, k]
        assert_close(enc.bias(torch.arange(12), torch.arange(12)), expected, rtol=0, atol=0)
        # decoding: 1 query after 1000 cached keys, distances past max_distance
        expected = attn.compute_bias(1, 1001, past_seen_tokens=1000)[0]
        got = enc.bias(torch.tensor([1000]), torch.arange(1001))
        assert_close(got, expected, rtol=0, atol=0)


@needs_hf
@pytest.mark.parametrize("backend", ["sdpa", "math"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_attention_matches_t5_attention(bidirectional, backend, attention_tol):
    """T5 does not scale its scores: posenc.attention with scale=1.0 reproduces it."""
    attn = t5_attention(bidirectional)
    enc = copy_of(attn, bidirectional)
    b, seq = 2, 9
    x = torch.randn(b, seq, 32)
    mask = None
    if not bidirectional:  # T5's decoder gets its causal mask from outside, additive
        mask = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)[None, None]
    with torch.no_grad():
        expected = attn(x, mask=mask)[0]
        q, k, v = (
            proj(x).view(b, seq, 4, 8).transpose(1, 2) for proj in (attn.q, attn.k, attn.v)
        )  # [b, h, s, d]
        out = posenc.attention(
            q, k, v, encoding=enc, causal=not bidirectional, scale=1.0, backend=backend
        )
        got = attn.o(out.transpose(1, 2).reshape(b, seq, 32))
        bias = enc.bias(torch.arange(seq), torch.arange(seq))
    rounding = attention_tol(
        q, k, v, bias, scale=1.0, causal=not bidirectional, out_proj=attn.o.weight
    )
    assert_close(got, expected, **rounding)


# backends -----------------------------------------------------------------------------------


def small_enc(bidirectional=True):
    enc = T5Bias(n_heads=4, num_buckets=8, max_distance=6, bidirectional=bidirectional)
    torch.nn.init.normal_(enc.weight)
    return enc


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("flex", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_flex_sdpa_math_agree_when_decoding(causal, flex, dense_attention, attention_tol, backends):
    """q_len != k_len: the queries are the last 5 of 9 positions (a KV cache). Flex in
    ``make test-slow`` (its compile; T5's flex path is in the default suite through
    tests/attn/test_backends.py)."""
    if flex and "flex" not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    backends = ("flex",) if flex else tuple(b for b in backends if b != "flex")
    enc = small_enc()
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    allowed = (torch.arange(9) <= torch.arange(4, 9)[:, None]) if causal else None
    bias = enc.bias(torch.arange(4, 9), torch.arange(9))
    expected = dense_attention(q, k, v, bias, allowed)
    rounding = attention_tol(q, k, v, bias, allowed=allowed)
    with torch.no_grad():
        for backend in backends:
            out = posenc.attention(q, k, v, encoding=enc, causal=causal, backend=backend)
            assert_close(out.double(), expected, **rounding, msg=backend)


def test_gradients_agree_between_sdpa_and_math(grad_tol, score_size):
    enc = small_enc(bidirectional=False)
    inputs = [torch.randn(2, 4, 5, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)]
    grads = {}
    for backend in ("sdpa", "math"):
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        out = posenc.attention(q, k, v, encoding=enc, backend=backend)
        grads[backend] = torch.autograd.grad(out.sin().sum(), (q, k, v, enc.weight))
    q, k, _ = inputs
    size = score_size(q, k, enc.bias(torch.arange(4, 9), torch.arange(9)), causal=True)
    rounding = grad_tol(q, k, grads["math"], size)
    for got, expected in zip(grads["sdpa"], grads["math"], strict=True):
        assert_close(got, expected, **rounding)
    assert grads["math"][3].abs().sum() > 0


@pytest.mark.filterwarnings("ignore:.*flex_attention.*")
def test_score_mod_carries_gradients_into_the_table(attention_tol, grad_tol, score_size):
    """Flex attention's own (eager) autograd differentiates the score_mod: the gradient
    reaches the bias table through it. Compiled flex has no backward on the CPU (see the
    CUDA test below)."""
    from torch.nn.attention.flex_attention import flex_attention

    enc = small_enc()
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 9, 8), torch.randn(2, 4, 9, 8)
    out = flex_attention(q, k, v, score_mod=enc.score_mod(q=q, q_offset=4))
    (grad,) = torch.autograd.grad(out.sin().sum(), enc.weight)
    out_math = posenc.attention(q, k, v, encoding=enc, causal=False, backend="math")
    (expected,) = torch.autograd.grad(out_math.sin().sum(), enc.weight)
    bias = enc.bias(torch.arange(4, 9), torch.arange(9))
    # each within the bound of the exact result: at most twice it apart
    assert_close(out, out_math, atol=2 * attention_tol(q, k, v, bias)["atol"], rtol=0)
    assert_close(grad, expected, **grad_tol(q, k, [expected], score_size(q, k, bias)))


@needs_cuda
@pytest.mark.parametrize("causal", [True, False])
def test_flex_gradients_match_math_on_cuda(causal):
    enc = small_enc().cuda()
    inputs = [torch.randn(2, 4, 5, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)]
    grads = {}
    for backend in ("flex", "math"):
        q, k, v = (t.cuda().requires_grad_() for t in inputs)
        out = posenc.attention(q, k, v, encoding=enc, causal=causal, backend=backend)
        grads[backend] = (out, *torch.autograd.grad(out.sin().sum(), (q, k, v, enc.weight)))
    for got, expected in zip(grads["flex"], grads["math"], strict=True):
        assert_close(got, expected, rtol=1e-4, atol=1e-4)


# the model ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_cached_generation_equals_recomputation(n_kv_heads, sharpen, check_cached_decoding):
    encoding = {"name": "t5", "num_buckets": 8, "max_distance": 6, "init_std": 1.0}
    model = TransformerLM(37, 32, 2, 4, encoding=encoding, n_kv_heads=n_kv_heads).eval()
    cached, full = check_cached_decoding(sharpen(model), torch.randint(0, 37, (2, 5)), 10)
    with torch.no_grad():
        model.encoding.weight.zero_()  # the bias matters: without it the logits change
        assert not torch.allclose(model(cached), full, atol=1e-3)
