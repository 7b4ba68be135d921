"""PoPE: against the paper's complex-valued score written out, against x-transformers'
``PolarEmbedding``, its properties (relative, the phase from position alone, the score
scale of the input width), attention on every backend, and a TransformerLM that caches the
wider keys."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.models import TransformerLM
from posenc.rotary.pope import PoPE

HEADS, D = 4, 8


def pope(phase_init="uniform", heads=HEADS, d=D, base=10000.0):
    return PoPE(head_dim=d, n_heads=heads, base=base, phase_init=phase_init)


def naive_scores(q, k, q_pos, k_pos, phase, base=10000.0):
    """``Re Σ_c q̃_c·conj(k̃_c)`` with ``q̃_c = softplus(q_c)·e^{i(t·θ_c − δ_c)}`` and
    ``k̃_c = softplus(k_c)·e^{i·s·θ_c}``, ``θ_c = base^(−c/d)``, as complex numbers in
    float64 (key heads repeated to the query heads). Shapes: -> ``[b, h, q_len, k_len]``."""
    d = q.shape[-1]
    theta = base ** -(torch.arange(d, dtype=torch.float64) / d)
    q_phase = q_pos.double().view(-1, 1) * theta - phase.double().view(-1, 1, d)  # [h, t, d]
    k_phase = k_pos.double().view(-1, 1) * theta  # [s, d]
    qc = torch.nn.functional.softplus(q.double()) * torch.exp(1j * q_phase)
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    kc = torch.nn.functional.softplus(k.double()) * torch.exp(1j * k_phase)
    return (qc @ kc.conj().transpose(-1, -2)).real


def score_tol(tol, q, k):
    """A dot product of 2·d terms, each a softplus times a cos/sin of an angle computed in
    float64 then rounded once (float32)."""
    size = torch.nn.functional.softplus(q).max() * torch.nn.functional.softplus(k).max()
    return tol(n=2 * q.shape[-1] + 4, scale=2 * q.shape[-1] * size.item())


@pytest.mark.parametrize("kv_heads", [HEADS, 2, 1])
def test_scores_match_the_complex_formula(kv_heads, tol):
    enc = pope()
    q, k = torch.randn(2, HEADS, 7, D), torch.randn(2, kv_heads, 7, D)
    positions = torch.arange(7) + 50
    q2, k2 = enc(q, k, positions=positions)
    assert q2.shape == (2, HEADS, 7, 2 * D) and k2.shape == (2, kv_heads, 7, 2 * D)
    scores = q2 @ k2.repeat_interleave(HEADS // kv_heads, dim=1).transpose(-1, -2)
    expected = naive_scores(q, k, positions, positions, enc.phase.detach())
    assert_close(scores.double(), expected, **score_tol(tol, q, k))


def test_scores_match_x_transformers(tol):
    from x_transformers.x_transformers import PolarEmbedding, apply_polar_pos_emb

    enc = pope()  # offsets drawn in [-2π, 0], where x-transformers' clamp does nothing
    peer = PolarEmbedding(D, HEADS)
    with torch.no_grad():
        peer.learned_bias.copy_(enc.phase.view(HEADS, 1, D))
    q, k = torch.randn(2, HEADS, 9, D), torch.randn(2, HEADS, 9, D)
    freqs, offset = peer(torch.arange(9))
    theirs = apply_polar_pos_emb(q, freqs) @ apply_polar_pos_emb(k, freqs + offset).mT
    q2, k2 = enc(q, k)
    assert_close(q2 @ k2.mT, theirs, **score_tol(tol, q, k))
    assert_close(enc.inv_freq().float(), peer.inv_freq)


def test_relative_and_phase_from_position_alone(tol):
    """Scores depend on ``t − s`` only; with no offsets a query and key at one position
    score ``Σ softplus(q)·softplus(k)`` whatever their content: content sets magnitudes,
    never phases."""
    enc = pope()
    q, k = torch.randn(1, HEADS, 6, D), torch.randn(1, HEADS, 6, D)
    near = enc(q, k, positions=torch.arange(6))
    far = enc(q, k, positions=torch.arange(6) + 10_000)
    rounding = tol(n=2 * D + 8, scale=2 * D * 10.0)
    assert_close(near[0] @ near[1].mT, far[0] @ far[1].mT, **rounding)
    flat = pope("zeros")
    q2, k2 = flat(q, k, positions=torch.full((6,), 7))
    magnitudes = torch.nn.functional.softplus(q) @ torch.nn.functional.softplus(k).mT
    assert_close(q2 @ k2.mT, magnitudes, **rounding)


@pytest.mark.parametrize(("q_len", "k_len", "kv_heads"), [(9, 9, 4), (9, 9, 2), (3, 11, 2)])
def test_attention_keeps_the_input_scale(q_len, k_len, kv_heads, attention_tol):
    """The score scale is ``1/√head_dim`` of the input width, not of the doubled one."""
    enc = pope()
    q, k = torch.randn(2, HEADS, q_len, D), torch.randn(2, kv_heads, k_len, D)
    v = torch.randn(2, kv_heads, k_len, D)
    out = posenc.attention(q, k, v, enc)
    assert out.shape == (2, HEADS, q_len, D)
    k_pos = torch.arange(k_len)
    scores = naive_scores(q, k, k_pos[k_len - q_len :], k_pos, enc.phase.detach()) / math.sqrt(D)
    future = torch.ones(k_len, k_len, dtype=torch.bool).triu(1)[k_len - q_len :]
    probs = scores.masked_fill(future, float("-inf")).softmax(-1)
    expected = probs @ v.double().repeat_interleave(HEADS // kv_heads, dim=1)
    q2, k2 = enc(q, k, positions=k_pos[k_len - q_len :], k_positions=k_pos)
    tol = attention_tol(q2, k2, v, scale=D**-0.5, causal=True, extra_n=2 * D)
    assert_close(out.double(), expected, **tol)


# flex compiles its kernel (7 s on a cold inductor cache): make test-slow
@pytest.mark.parametrize("backend", ["sdpa", "math", pytest.param("flex", marks=pytest.mark.slow)])
def test_backends_agree(backend, attention_tol, backends):
    if backend not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    enc = pope()
    q, k, v = torch.randn(2, HEADS, 12, D), torch.randn(2, 2, 12, D), torch.randn(2, 2, 12, D)
    with torch.no_grad():
        out = posenc.attention(q, k, v, enc, backend=backend, window=5)
        expected = posenc.attention(q, k, v, enc, backend="math", window=5)
    q2, k2 = enc(q, k)
    allowed = torch.ones(12, 12, dtype=torch.bool).tril().triu(-4)
    assert_close(out, expected, **attention_tol(q2, k2, v, scale=D**-0.5, allowed=allowed))


def test_gradients_reach_the_offsets_and_inputs():
    enc = pope()
    q = torch.randn(1, HEADS, 5, D, requires_grad=True)
    out = posenc.attention(q, q, q, enc)
    out.square().sum().backward()
    assert enc.phase.grad is not None and enc.phase.grad.abs().sum() > 0
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_bad_heads_and_config():
    enc = pope()
    with pytest.raises(ValueError, match="each query head has its own phase offsets"):
        enc(torch.randn(1, 2, 5, D), torch.randn(1, 2, 5, D))
    with pytest.raises(ValueError, match="phase_init must be one of"):
        posenc.create("pope", head_dim=8, n_heads=2, phase_init="ones")
    with pytest.raises(ValueError, match="base must be > 1"):
        posenc.create("pope", head_dim=8, n_heads=2, base=1.0)


def test_transformer_lm_caches_wider_keys(sharpen, check_cached_decoding):
    model = sharpen(TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding="pope"))
    cache = model.new_cache(2, 20)
    assert cache.keys[0].shape[-1] == 2 * model.head_dim
    assert cache.values[0].shape[-1] == model.head_dim
    check_cached_decoding(model.eval(), torch.randint(0, 37, (2, 5)), 9)
