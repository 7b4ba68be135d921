"""Forgetting attention (FoX): against the paper's equations one score at a time, against
x-transformers' ``DataDependentAlibi``, its properties (constant gates are ALiBi, open gates
are NoPE, positions play no part), every attention backend and mask, its gradients, and a
TransformerLM with a forget gate per layer, trained and decoded with a KV cache."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.forget import forget_keys
from posenc.bias.fox import Fox
from posenc.functional.fox import forget_bias, forget_clock
from posenc.models import LayerPlan, TransformerLM

HEADS, DIM = 4, 12


def fox(bias_init=None, heads=HEADS, dim=DIM):
    return Fox(n_heads=heads, dim=dim, bias_init=bias_init)


def naive(q, k, v, x, weight, bias, sinks=None):
    """The paper's eq. for every score, in float64: ``f_t = σ(w_h·x_t + b_h)``,
    ``s_ij = q_i·k_j/√d + Σ_{l=j+1..i} log f_l`` over keys ``j <= i`` (the queries the last
    ``q_len`` tokens), softmax (with a sink logit per head if given), weights times values."""
    q, k, v, x = q.double(), k.double(), v.double(), x.double()
    weight, bias = weight.detach().double(), bias.detach().double()
    batch, heads, q_len, d = q.shape
    k_len, group = k.shape[2], heads // k.shape[1]
    out = torch.zeros(batch, heads, q_len, d, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            log_f = [math.log(torch.sigmoid(weight[h] @ x[b, t] + bias[h])) for t in range(k_len)]
            for qi in range(q_len):
                i = k_len - q_len + qi  # the query's token
                scores = []
                for j in range(i + 1):
                    decay = sum(log_f[j + 1 : i + 1])
                    scores.append(q[b, h, qi] @ k[b, h // group, j] / math.sqrt(d) + decay)
                s = torch.stack(scores)
                if sinks is not None:
                    s = torch.cat((s, sinks[h].double().view(1)))
                p = s.softmax(0)[: i + 1]
                out[b, h, qi] = p @ v[b, h // group, : i + 1]
    return out


def inputs(b=2, h=HEADS, kv_h=2, q_len=9, k_len=9, d=8, dim=DIM):
    return (
        torch.randn(b, h, q_len, d),
        torch.randn(b, kv_h, k_len, d),
        torch.randn(b, kv_h, k_len, d),
        torch.randn(b, k_len, dim),
    )


def clock_err(clock):
    """How far the extended path's scores may be off besides the dot product's rounding:
    ``m_β − c_j`` and the ``1/scale · scale`` product round at a few eps of the clocks."""
    return 4 * torch.finfo(torch.float32).eps * clock.abs().max().item()


@pytest.mark.parametrize(("kv_h", "q_len", "k_len"), [(4, 9, 9), (2, 9, 9), (2, 3, 11), (1, 1, 7)])
@pytest.mark.parametrize("bias_init", [None, -1.0, 3.0])
def test_attention_matches_the_paper(kv_h, q_len, k_len, bias_init, attention_tol):
    enc = fox(bias_init)
    q, k, v, x = inputs(kv_h=kv_h, q_len=q_len, k_len=k_len)
    clock = enc.clock(x)
    out = posenc.attention(q, k, v, enc, bias=clock)
    expected = naive(q, k, v, x, enc.gate_weight, enc.gate_bias)
    bias = forget_bias(clock[..., k_len - q_len :], clock)
    tol = attention_tol(q, k, v, bias=bias, causal=True, score_err=clock_err(clock))
    assert_close(out.double(), expected, **tol)


def test_bias_matches_x_transformers(tol):
    from x_transformers.x_transformers import DataDependentAlibi

    enc = fox(bias_init=1.0)
    peer = DataDependentAlibi(DIM, HEADS)
    with torch.no_grad():
        peer.to_forget_gates[0].weight.copy_(enc.gate_weight)
        peer.to_forget_gates[0].bias.copy_(enc.gate_bias)
    x = torch.randn(3, 40, DIM)
    positions = torch.arange(40)
    ours = enc.bias(positions, positions, x=x)
    theirs = peer(x)
    # both: the same linear and logsigmoid, a cumulative sum of 40, one subtraction
    assert_close(ours, theirs, **tol(n=42, scale=ours.abs().max().item()))


def test_constant_gates_are_alibi():
    """With ``w = 0`` every gate is ``σ(b_h)``: the bias is ``log σ(b_h)·(i − j)``, ALiBi
    with the slope ``−log σ(b_h)`` (the paper's "data-dependent ALiBi")."""
    enc = fox()
    with torch.no_grad():
        enc.gate_weight.zero_()
        enc.gate_bias.copy_(torch.tensor([-2.0, 0.0, 1.0, 4.0]))
    x = torch.randn(2, 16, DIM)
    positions = torch.arange(16)
    slopes = -torch.nn.functional.logsigmoid(enc.gate_bias.detach().double())
    distance = (positions.view(-1, 1) - positions.view(1, -1)).double()
    alibi = -slopes.view(-1, 1, 1) * distance  # [h, L, L]
    bias = enc.bias(positions, positions, x=x.double())
    assert bias.dtype == torch.float64
    lower = torch.ones(16, 16, dtype=torch.bool).tril()
    assert_close(bias[:, :, lower], alibi.expand(2, -1, -1, -1)[:, :, lower])


def test_open_gates_are_nope(attention_tol):
    """Gates of 1 (``log f = 0``) forget nothing: plain causal attention."""
    enc = fox(bias_init=200.0)  # logsigmoid(200) = -exp(-200): 0 in float32
    with torch.no_grad():
        enc.gate_weight.zero_()
    q, k, v, x = inputs()
    clock = enc.clock(x)
    assert torch.equal(clock, torch.zeros_like(clock))
    out = posenc.attention(q, k, v, enc, bias=clock)
    nope = posenc.attention(q, k, v)
    assert_close(out, nope, **attention_tol(q, k, v, causal=True))


def test_positions_play_no_part():
    """Distance is counted in gated tokens: positions shifted far away, or with gaps, give
    the same output (they order the causal mask only)."""
    enc = fox()
    q, k, v, x = inputs(kv_h=4)
    clock = enc.clock(x)
    out = posenc.attention(q, k, v, enc, bias=clock)
    for positions in (torch.arange(9) + 1000, torch.arange(9) * 7):
        moved = posenc.attention(
            q, k, v, enc, bias=clock, q_positions=positions, k_positions=positions
        )
        assert_close(moved, out)


def test_forget_gates_decay_the_past():
    """A strongly forgetting head attends to the last key alone; the same model with open
    gates spreads its weight."""
    enc = fox(bias_init=-30.0, heads=1)  # log f ≈ -30 a token
    with torch.no_grad():
        enc.gate_weight.zero_()
    q = torch.zeros(1, 1, 6, 4)  # equal scores: only the bias decides
    k = torch.zeros(1, 1, 6, 4)
    v = torch.eye(6).view(1, 1, 6, 6)[..., :4].contiguous()
    x = torch.randn(1, 6, DIM)
    out = posenc.attention(q, k, v, enc, bias=enc.clock(x))
    assert_close(out[0, 0], v[0, 0])  # each query reads its own token


#: (backend, pattern): flex compiles the extended heads per pattern (8-13 s on a cold
#: inductor cache): ``make test-slow`` runs them, the default suite the other backends
CASES = [
    (backend, pattern)
    for backend in ("auto", "sdpa", "math")
    for pattern in ({}, {"window": 4}, {"chunk": 4})
] + [pytest.param("flex", p, marks=pytest.mark.slow) for p in ({}, {"window": 4}, {"chunk": 4})]


@pytest.mark.parametrize(("backend", "pattern"), CASES)
def test_backends_and_patterns_agree(backend, pattern, attention_tol, backends):
    if backend not in ("auto", *backends):
        pytest.skip("compiled flex attention does not run on this CPU")
    enc = fox(bias_init=0.5)
    q, k, v, x = inputs(q_len=12, k_len=12)
    clock = enc.clock(x)
    with torch.no_grad():
        out = posenc.attention(q, k, v, enc, bias=clock, backend=backend, **pattern)
    expected = posenc.attention(q, k, v, enc, bias=clock, backend="math", **pattern)
    allowed = torch.ones(12, 12, dtype=torch.bool).tril()
    i, j = torch.arange(12).view(-1, 1), torch.arange(12).view(1, -1)
    if "window" in pattern:
        allowed &= i - j < pattern["window"]
    if "chunk" in pattern:
        allowed &= i // pattern["chunk"] == j // pattern["chunk"]
    bias = forget_bias(clock, clock)
    tol = attention_tol(q, k, v, bias=bias, allowed=allowed, score_err=clock_err(clock))
    assert_close(out, expected, **tol)


def test_sinks_and_softcap_see_the_row_constant(attention_tol):
    """A sink's logit competes with ``c_i − c_j``, not with ``−c_j``: with sinks the bias
    must be the full one (here, against the paper's equation with a sink)."""
    enc = fox(bias_init=-1.0)
    q, k, v, x = inputs(kv_h=4)
    sinks = torch.randn(HEADS)
    clock = enc.clock(x)
    out = posenc.attention(q, k, v, enc, bias=clock, sinks=sinks)
    expected = naive(q, k, v, x, enc.gate_weight, enc.gate_bias, sinks=sinks)
    bias = forget_bias(clock, clock)
    tol = attention_tol(q, k, v, bias=bias, causal=True, score_err=clock_err(clock))
    assert_close(out.double(), expected, **tol)
    capped = posenc.attention(q, k, v, enc, bias=clock, softcap=5.0)
    assert capped.shape == q.shape and torch.isfinite(capped).all()


def test_padding_and_segments_follow_the_masks(attention_tol):
    enc = fox()
    q, k, v, x = inputs(kv_h=4, q_len=10, k_len=10)
    clock = enc.clock(x)
    segments = torch.tensor([[0] * 4 + [1] * 6, [0] * 7 + [1] * 3])
    out = posenc.attention(q, k, v, enc, bias=clock, segment_ids=segments)
    expected = posenc.attention(q, k, v, enc, bias=clock, segment_ids=segments, backend="math")
    same = segments.unsqueeze(-1) == segments.unsqueeze(-2)  # [b, q, k]
    allowed = (same & torch.ones(10, 10, dtype=torch.bool).tril()).unsqueeze(1)
    tol = attention_tol(
        q, k, v, bias=forget_bias(clock, clock), allowed=allowed, score_err=clock_err(clock)
    )
    assert_close(out, expected, **tol)


def test_gradients_match_the_materialised_bias(grad_tol, score_size):
    """The extended path's gradients (SDPA's ``dk`` carries the clock's) equal those of
    attention with the materialised bias, for q, k, v and the gates' parameters and input."""
    enc = fox(bias_init=0.0)
    q, k, v, x = inputs(kv_h=2, q_len=10, k_len=10)
    for t in (q, k, v, x):
        t.requires_grad_(True)
    wanted = (q, k, v, x, enc.gate_weight, enc.gate_bias)
    out = posenc.attention(q, k, v, enc, bias=enc.clock(x))
    got = torch.autograd.grad(out.square().sum(), wanted)
    clock = enc.clock(x)
    group = HEADS // 2
    scores = q @ k.repeat_interleave(group, 1).transpose(-1, -2) / math.sqrt(8)
    scores = scores + forget_bias(clock, clock)
    scores = scores.masked_fill(torch.ones(10, 10, dtype=torch.bool).triu(1), float("-inf"))
    reference = scores.softmax(-1) @ v.repeat_interleave(group, 1)
    expected = torch.autograd.grad(reference.square().sum(), wanted)
    size = score_size(q, k, bias=forget_bias(clock, clock), causal=True)
    rounding = grad_tol(q, k, expected, size + clock.abs().max().item())
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e, **rounding)


def test_extra_coordinates_fill_the_width():
    """Heads of 64 get 8 centring blocks (72 wide, the same kernel step); the scores they
    add are ``m_β − c_j``, exactly the key term up to the row constant."""
    q, k, v = torch.randn(1, 2, 32, 64), torch.randn(1, 1, 32, 64), torch.randn(1, 1, 32, 64)
    clock = forget_clock(-torch.rand(1, 2, 32))
    q2, k2, v2 = forget_keys(q, k, v, clock, scale=0.125)
    assert q2.shape == (1, 2, 32, 72) and k2.shape == v2.shape == (1, 2, 32, 72)
    assert torch.equal(v2[..., 64:], torch.zeros(1, 2, 32, 8))
    extra = (q2[..., 64:] @ k2[..., 64:].transpose(-1, -2)) * 0.125  # [1, 2, 32, 32]
    # row i: m_β(i) − c_j, with m_β the clock of the block's last query
    block = torch.arange(32) // 4
    centres = clock[..., block * 4 + 3]  # [1, 2, 32]
    assert_close(extra, centres.unsqueeze(-1) - clock.unsqueeze(-2))


def test_float64_and_half_inputs():
    enc = fox().double()
    x = torch.randn(2, 5, DIM, dtype=torch.float64)
    assert enc.clock(x).dtype == torch.float64
    q = torch.randn(2, HEADS, 5, 8, dtype=torch.bfloat16)
    clock = fox().clock(x.float())
    out = posenc.attention(q, q[:, :2], q[:, :2], fox(), bias=clock)
    assert out.dtype == torch.bfloat16


def test_bad_calls_raise():
    enc = fox()
    q, k, v, x = inputs()
    with pytest.raises(ValueError, match=r"pass bias=fox\.clock"):
        posenc.attention(q, k, v, enc)
    with pytest.raises(ValueError, match=r"bias must be the clock of 'fox', \[batch, heads"):
        posenc.attention(q, k, v, enc, bias=enc.clock(x)[..., :4])
    with pytest.raises(ValueError, match="queries are the last of its keys' tokens"):
        k5, v5 = k[:, :, :5], v[:, :, :5]
        positions = torch.arange(9)
        posenc.attention(
            q,
            k5,
            v5,
            enc,
            bias=enc.clock(x[:, :5]),
            q_positions=positions,
            k_positions=positions[:5],
        )
    with pytest.raises(ValueError, match="causal attention only"):
        posenc.attention(q, k, v, enc, bias=enc.clock(x), causal=False)
    with pytest.raises(TypeError, match="depends on the layer's input"):
        enc.score_mod()
    with pytest.raises(TypeError, match="depends on the layer's input"):
        enc.bias_at(torch.tensor(0), torch.tensor(1), torch.tensor(0))
    with pytest.raises(ValueError, match=r"start must be \[batch, n_heads, 1\]"):
        enc.clock(x, start=torch.zeros(2, HEADS))
    with pytest.raises(ValueError, match="missing required config"):
        posenc.create("fox", n_heads=4)


def test_transformer_lm_gives_each_layer_its_gates(sharpen, check_cached_decoding):
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=3, n_heads=4, encoding="fox"))
    gates = [e for e in model.encodings if isinstance(e, Fox)]
    assert len(gates) == 3  # one per layer, as in the paper
    assert len({id(e.gate_weight) for e in gates}) == 3
    ids = torch.randint(0, 37, (2, 24))
    model(ids).logsumexp(-1).mean().backward()
    for e in gates:
        assert e.gate_weight.grad is not None and e.gate_weight.grad.abs().sum() > 0
    check_cached_decoding(model.eval(), ids[:, :5], 9)


def test_transformer_lm_rolling_cache_with_a_window(sharpen, check_cached_decoding):
    """A windowed FoX layer keeps only its last clocks, as its last keys."""
    plan = LayerPlan([{"encoding": "fox", "window": 4}, {"encoding": "fox"}])
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, plan=plan))
    cache = model.eval().new_cache(2, 20)
    assert cache.rolling
    check_cached_decoding(model, torch.randint(0, 37, (2, 6)), 10)
