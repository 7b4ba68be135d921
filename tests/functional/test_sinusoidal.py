"""Sinusoidal encoding: against the paper's formula, the article's module, and its properties."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional import sinusoidal, sinusoidal_inv_freq


def reference(positions, dim, base=10000.0, layout="interleaved"):
    """A loop over positions and pairs, straight from Vaswani et al. §3.5, in float64."""
    out = torch.zeros(len(positions), dim, dtype=torch.float64)
    for row, pos in enumerate(positions):
        for i in range(dim // 2):
            angle = pos / base ** (2 * i / dim)
            if layout == "interleaved":
                out[row, 2 * i], out[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
            else:
                out[row, i], out[row, dim // 2 + i] = math.sin(angle), math.cos(angle)
    return out


def table_tol(tol):
    """A float32 table against an exact one: the angles are formed in float64 and reduced
    modulo 2π, then rounded to float32 (eps/2 of up to 2π) before sin/cos (an ulp)."""
    return tol(n=2, scale=2 * math.pi)


def float32_angles_tol(tol, largest):
    """Tables from angles formed in float32 (position times float32 frequencies, or the
    article's exp of float32 exponents): off by about eps·|angle| each, angles up to
    ``largest``, against ours (see :func:`table_tol`)."""
    return tol(n=2, scale=largest)


class ArticlePositionalEncoding(torch.nn.Module):
    """The source article's PyTorch module, as printed there (the reference layout)."""

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, : x.size(1), :]


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
@pytest.mark.parametrize("dim", [2, 4, 16, 64])
def test_matches_formula(dim, layout, tol):
    positions = [*range(0, 200, 7), 0.5, 3.25]
    got = sinusoidal(torch.tensor(positions, dtype=torch.float64), dim, layout=layout)
    torch.testing.assert_close(got, reference(positions, dim, layout=layout), rtol=0, atol=1e-12)
    got32 = sinusoidal(torch.tensor(positions), dim, layout=layout)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(
        got32.double(), reference(positions, dim, layout=layout), **table_tol(tol)
    )


def test_base_is_used():
    torch.testing.assert_close(
        sinusoidal(torch.arange(30, dtype=torch.float64), 8, base=500.0),
        reference(range(30), 8, base=500.0),
    )


def test_matches_article_module(tol):
    article = ArticlePositionalEncoding(64, max_len=300)
    x = torch.randn(2, 300, 64)
    ours = x + sinusoidal(torch.arange(300), 64)
    rounding = float32_angles_tol(tol, largest=300)  # positions below 300
    torch.testing.assert_close(ours, article(x), **rounding)
    # interleaved: sine on even columns, cosine on odd columns
    pe = sinusoidal(torch.arange(300), 64)
    angles = torch.arange(300.0)[:, None] * sinusoidal_inv_freq(64)
    torch.testing.assert_close(pe[:, 0::2], angles.sin(), **rounding)
    torch.testing.assert_close(pe[:, 1::2], angles.cos(), **rounding)


def test_concat_is_a_fixed_permutation_of_interleaved():
    positions = torch.arange(50)
    inter, concat = sinusoidal(positions, 16), sinusoidal(positions, 16, layout="concat")
    perm = torch.cat((torch.arange(0, 16, 2), torch.arange(1, 16, 2)))
    # the same sin/cos of the same angles, written to other columns
    torch.testing.assert_close(inter[:, perm], concat, rtol=0, atol=0)


def test_heatmap_high_dimensions_sit_near_sin0_cos1():
    """The article's heatmap: dim 128, 50 positions; slow high dimensions look like stripes."""
    pe = sinusoidal(torch.arange(50), 128)
    high = pe[:, 88:]  # pairs 44..63: wavelength > 2π·500, angle < 0.1 at position 49
    assert high[:, 0::2].abs().max() < 0.1  # sine near 0
    assert high[:, 1::2].min() > 0.995  # cosine near 1
    low = pe[:, 0]  # the fastest sine takes both signs within 50 positions
    assert low.min() < -0.9 and low.max() > 0.9


@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=20))
def test_bounded(positions):
    pe = sinusoidal(torch.tensor(positions, dtype=torch.float64), 32)
    assert pe.abs().max() <= 1.0


@given(st.floats(0, 1000), st.floats(-200, 200), st.sampled_from(["interleaved", "concat"]))
def test_shift_is_a_fixed_linear_map(pos, k, layout):
    """PE(pos + k) = M_k PE(pos), with M_k a rotation of each (sin, cos) pair by k·ω_i that
    does not depend on pos."""
    dim = 16
    omega = sinusoidal_inv_freq(dim, dtype=torch.float64)
    c, s = (k * omega).cos(), (k * omega).sin()
    m = torch.zeros(dim, dim, dtype=torch.float64)
    half = dim // 2
    for i in range(half):
        si, ci = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, half + i)
        m[si, si], m[si, ci] = c[i], s[i]  # sin(a + b) = sin a cos b + cos a sin b
        m[ci, si], m[ci, ci] = -s[i], c[i]  # cos(a + b) = cos a cos b - sin a sin b
    at = sinusoidal(torch.tensor([pos, pos + k], dtype=torch.float64), dim, layout=layout)
    torch.testing.assert_close(m @ at[0], at[1], atol=1e-9, rtol=0)


def test_any_length_and_batch_shape(tol):
    positions = torch.tensor([[0, 100_000], [7, 1]])
    pe = sinusoidal(positions, 8)
    assert pe.shape == (2, 2, 8)
    # the same angles; sin/cos of another shape may round otherwise (a vector lane)
    torch.testing.assert_close(pe[1, 0], sinusoidal(torch.tensor(7), 8), **table_tol(tol))


def test_bad_arguments():
    with pytest.raises(ValueError, match="dim must be even"):
        sinusoidal(torch.arange(3), 5)
    with pytest.raises(ValueError, match="layout must be one of"):
        sinusoidal(torch.arange(3), 4, layout="half")


def test_exact_at_large_positions(tol):
    positions = [10**5, 10**6 + 3, 10**7 - 1]
    got = sinusoidal(torch.tensor(positions), 16)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), reference(positions, 16), **table_tol(tol))
