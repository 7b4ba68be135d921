"""FoPE (Hua et al. 2025): the formula written out in float64 (grouped heads, both layouts,
clipped pairs), RoPE and p-RoPE without harmonics, what the harmonics change, the clipping
rule, and bad input. No peer library ships FoPE (Intern-S1-Pro's is remote code)."""

import math

import pytest
import torch

import posenc
from posenc.functional.fope import fope_inv_freq


def naive(x, positions, enc):
    """Per head h (its key head g = h // group), position m and pair i: cos_i = Σ_j
    C[g, j, i]·cos(θ_j·m), sin_i = Σ_j S[g, j, i]·sin(θ_j·m) over the kept θ_j (cos 1 and
    sin 0 for a clipped pair), then (a, b) -> (a·cos − b·sin, a·sin + b·cos); loops in
    float64."""
    c = enc.config
    d, half = c.head_dim, c.head_dim // 2
    theta = [c.base ** (-2 * i / d) for i in range(half)]
    kept = [t for t in theta if c.train_length is None or 2 * math.pi / t <= c.train_length]
    coef_c, coef_s = enc.cos_coef.double(), enc.sin_coef.double()
    group = x.shape[1] // c.n_kv_heads
    out = x.double().clone()
    for b in range(x.shape[0]):
        for h in range(x.shape[1]):
            g = h // group
            for s, m in enumerate(positions.tolist()):
                for i in range(half):
                    if i < len(kept):
                        cos = sum(coef_c[g, j, i] * math.cos(t * m) for j, t in enumerate(kept))
                        sin = sum(coef_s[g, j, i] * math.sin(t * m) for j, t in enumerate(kept))
                    else:
                        cos, sin = 1.0, 0.0
                    ia, ib = (i, i + half) if c.layout == "half" else (2 * i, 2 * i + 1)
                    a, bb = x[b, h, s, ia].double(), x[b, h, s, ib].double()
                    out[b, h, s, ia] = a * cos - bb * sin
                    out[b, h, s, ib] = a * sin + bb * cos
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("train_length", "n_kv_heads"), [(None, 1), (700, 2)])
def test_equals_the_formula_written_out(layout, train_length, n_kv_heads, tol):
    enc = posenc.create(
        "fope", head_dim=12, layout=layout, train_length=train_length, n_kv_heads=n_kv_heads
    )
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 5, 12, generator=gen), torch.randn(2, 2, 5, 12, generator=gen)
    positions = torch.tensor([0, 3, 50, 333, 1000])
    q2, k2 = enc(q, k, positions=positions)
    # a pair: two products of |x| < 6 with a series of K <= 6 terms of |coef| < 2 (cos, sin
    # of float64 angles rounded once to float32)
    rounding = tol(n=2 * 6 + 4, scale=6 * 6 * 2)
    torch.testing.assert_close(q2.double(), naive(q, positions, enc), **rounding)
    torch.testing.assert_close(k2.double(), naive(k, positions, enc), **rounding)
    if train_length is not None:  # periods 6.3, 29, 135, 628, 2916, 13535: 4 kept
        assert enc.cos_coef.shape == (2, 4, 4)
        still = [4, 5, 10, 11] if layout == "half" else [8, 9, 10, 11]
        assert torch.equal(q2[..., still], q[..., still])


def test_without_harmonics_it_is_rope_or_p_rope(tol):
    q = torch.randn(1, 2, 7, 16)
    positions = torch.arange(7) * 11
    plain = posenc.create("fope", head_dim=16, sigma=0.0)
    clipped = posenc.create("fope", head_dim=16, sigma=0.0, train_length=300)  # keeps 4 of 8
    assert clipped.cos_coef.shape[-1] == 4
    rope = posenc.create("rope", head_dim=16)
    p_rope = posenc.create("p_rope", head_dim=16, p=0.5)
    rounding = tol(n=4, scale=5.0)  # the same float32 tables, mixed by an identity
    for fope, peer in ((plain, rope), (clipped, p_rope)):
        torch.testing.assert_close(
            fope(q, q, positions=positions)[0], peer(q, q, positions=positions)[0], **rounding
        )


def test_harmonics_make_scores_depend_on_the_positions_not_only_their_difference():
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(enc, m, n):
        q2, _ = enc(q, q, positions=torch.tensor([m]))
        k2, _ = enc(k, k, positions=torch.tensor([n]))
        return (q2 * k2).sum().item()

    rope_like = posenc.create("fope", head_dim=16, sigma=0.0)
    assert score(rope_like, 7, 3) == pytest.approx(score(rope_like, 107, 103), abs=1e-4)
    fope = posenc.create("fope", head_dim=16, sigma=0.5)
    assert abs(score(fope, 7, 3) - score(fope, 107, 103)) > 1e-2


def test_the_coefficients_start_at_the_identity_plus_harmonics():
    torch.manual_seed(0)
    enc = posenc.create("fope", head_dim=64, n_kv_heads=2, sigma=0.3)
    for coef in (enc.cos_coef, enc.sin_coef):
        eye = torch.eye(32).expand(2, -1, -1)
        assert torch.equal(coef.diagonal(dim1=-2, dim2=-1), torch.ones(2, 32))
        off = coef[eye == 0]
        assert abs(off.std().item() - 0.3 / math.sqrt(32)) < 0.01  # 1,984 draws
    assert not torch.equal(enc.cos_coef, enc.sin_coef)


def test_clipping_keeps_a_period_equal_to_the_training_length():
    theta = fope_inv_freq(8, 10000.0, None)
    period = 2 * math.pi / theta[1].item()
    assert fope_inv_freq(8, 10000.0, math.ceil(period))[1] == theta[1]
    assert fope_inv_freq(8, 10000.0, math.floor(period))[1] == 0


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"train_length": 5}, "clips every frequency"),
        ({"sigma": -0.1}, "sigma"),
        ({"n_kv_heads": 0}, "n_kv_heads"),
        ({"head_dim": 7}, "head_dim"),
    ],
)
def test_bad_config_raises(config, match):
    with pytest.raises(ValueError, match=match):
        posenc.create("fope", **{"head_dim": 8, **config})


def test_heads_not_a_multiple_of_the_coefficient_sets_raise():
    enc = posenc.create("fope", head_dim=8, n_kv_heads=2)
    with pytest.raises(ValueError, match="n_kv_heads=2"):
        enc(torch.randn(1, 3, 4, 8), torch.randn(1, 2, 4, 8))
