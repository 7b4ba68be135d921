"""RoPE math: against a per-pair loop of the paper's formula, its properties, and precision."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq


def reference(x, positions, base=10000.0, layout="half", rotary_dim=None):
    """Rotate pair i of the vector at position m by m·base^(-2i/d): a loop, in float64."""
    x = x.double()
    out = x.clone()
    d = rotary_dim or x.shape[-1]
    for s, m in enumerate(positions):
        for i in range(d // 2):
            a, b = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
            angle = float(m) * base ** (-2 * i / d)
            c, si = math.cos(angle), math.sin(angle)
            xa, xb = x[..., s, a], x[..., s, b]
            out[..., s, a] = xa * c - xb * si
            out[..., s, b] = xb * c + xa * si
    return out


def rotate(x, positions, layout="half", base=10000.0, rotary_dim=None, head_dim=None):
    inv_freq, factor = rope_inv_freq(head_dim or x.shape[-1], base, rotary_dim=rotary_dim)
    cos, sin = rope_cos_sin(positions, inv_freq, factor)
    return apply_rope(x, cos, sin, layout)


def rotation_tol(tol, x):
    """A float32 rotation against an exact one: float64 angles (off by far less than a
    float32 ulp, even at 10^7), so three roundings (the table entry, the products, their
    sum) of terms up to |x1| + |x2| <= 2·max|x|."""
    return tol(n=3, scale=2 * x.abs().max().item())


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("head_dim", [2, 8, 64])
def test_matches_the_formula(layout, head_dim, tol):
    x = torch.randn(2, 3, 7, head_dim)
    positions = torch.tensor([0, 1, 2, 5, 100, 4095, 70000])
    expected = reference(x, positions.tolist(), layout=layout)
    got = rotate(x, positions, layout).double()
    torch.testing.assert_close(got, expected, **rotation_tol(tol, x))


def test_partial_rotary_rotates_the_leading_dimensions_only(tol):
    x = torch.randn(1, 2, 5, 16)
    out = rotate(x, torch.arange(5), rotary_dim=8)
    torch.testing.assert_close(out[..., 8:], x[..., 8:], rtol=0, atol=0)  # copied through
    expected = reference(x[..., :8], range(5), rotary_dim=8)
    torch.testing.assert_close(out[..., :8].double(), expected, **rotation_tol(tol, x))


def test_batched_positions(tol):
    x = torch.randn(2, 3, 4, 8)
    positions = torch.tensor([[0, 1, 2, 3], [7, 8, 9, 10]])
    out = rotate(x, positions)
    for b in range(2):  # tables of other shapes: a cos/sin may round otherwise, both sides
        expected = rotate(x[b : b + 1], positions[b])
        torch.testing.assert_close(out[b : b + 1], expected, **rotation_tol(tol, x))


vectors = st.lists(st.floats(-3, 3, allow_nan=False), min_size=16, max_size=16)


@given(vectors, vectors, st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 5000))
def test_scores_depend_only_on_the_distance(q, k, m, n, shift):
    """⟨R(m) q, R(n) k⟩ = ⟨R(m + s) q, R(n + s) k⟩."""
    q = torch.tensor(q, dtype=torch.float64).view(1, 1, 1, 16)
    k = torch.tensor(k, dtype=torch.float64).view(1, 1, 1, 16)

    def score(a, b):
        return (rotate(q, torch.tensor([a])) * rotate(k, torch.tensor([b]))).sum()

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift), atol=1e-5, rtol=1e-6)


@given(vectors, st.integers(0, 10**7), st.sampled_from(["half", "interleaved"]))
def test_norm_is_preserved(v, m, layout):
    x = torch.tensor(v, dtype=torch.float64).view(1, 1, 1, 16)
    out = rotate(x, torch.tensor([m]), layout)
    torch.testing.assert_close(out.norm(), x.norm(), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("position", [1_000_000, 10_000_000])
def test_fp32_path_is_exact_at_large_positions(position, tol):
    """A float32 product m·θ loses the phase at these positions; posenc forms angles in
    float64. Compared with a float64 reference, on the rotated vector."""
    x = torch.randn(1, 4, 3, 128)
    positions = torch.tensor([position - 1, position, position + 1])
    expected = reference(x, positions.tolist())
    out = rotate(x, positions)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, **rotation_tol(tol, x))
    naive = positions.float()[:, None] * rope_inv_freq(128)[0].float()  # what fp32 would give
    assert (naive.double() - positions.double()[:, None] * rope_inv_freq(128)[0]).abs().max() > 0.01


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_input_is_the_fp32_result_rounded_once(dtype, layout):
    x = torch.randn(2, 4, 50, 64).to(dtype)
    positions = torch.arange(1000, 1050)
    out = rotate(x, positions, layout)
    assert out.dtype == dtype
    # the same float32 operations, rounded once to dtype: bit for bit
    assert torch.equal(out, rotate(x.float(), positions, layout).to(dtype))


def test_attention_factor_scales_cos_and_sin_once(tol):
    inv_freq, _ = rope_inv_freq(8)
    cos, sin = rope_cos_sin(torch.arange(4), inv_freq, 1.5)
    cos1, sin1 = rope_cos_sin(torch.arange(4), inv_freq)
    # scaled in float64 then rounded, against rounded then scaled: two roundings of <= 1.5
    rounding = tol(n=2, scale=1.5)
    torch.testing.assert_close(cos, 1.5 * cos1, **rounding)
    torch.testing.assert_close(sin, 1.5 * sin1, **rounding)


def test_bad_layout():
    with pytest.raises(ValueError, match="layout must be one of"):
        apply_rope(torch.randn(1, 1, 1, 4), torch.ones(1, 2), torch.zeros(1, 2), "gptj")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_per_head_cos_sin(layout, tol):
    """4-D cos/sin ``[batch or 1, heads, seq, n]`` rotate each head by its own angles (the
    per-head tables of RoPE-Mixed); one head broadcasts like the 3-D tables."""
    x = torch.randn(2, 3, 5, 8)
    inv_freq, _ = rope_inv_freq(8)
    positions = [torch.tensor([0, 3, 9, 27, 81]) * (h + 1) for h in range(3)]
    tables = [rope_cos_sin(p, inv_freq) for p in positions]  # [seq, n] per head
    cos = torch.stack([c for c, _ in tables]).unsqueeze(0)  # [1, heads, seq, n]
    sin = torch.stack([s for _, s in tables]).unsqueeze(0)
    out = apply_rope(x, cos, sin, layout)
    for h in range(3):
        expected = reference(x[:, h : h + 1], positions[h].tolist(), layout=layout)
        got = out[:, h : h + 1].double()
        torch.testing.assert_close(got, expected, **rotation_tol(tol, x))
    batched = apply_rope(x, cos.expand(2, -1, -1, -1), sin.expand(2, -1, -1, -1), layout)
    # elementwise products and sums of the same values, each rounded once: bit for bit
    assert torch.equal(batched, out)
    one_head = apply_rope(x, cos[:, :1], sin[:, :1], layout)
    assert torch.equal(one_head, apply_rope(x, cos[0, 0], sin[0, 0], layout))
    with pytest.raises(ValueError, match="per-head cos/sin have 2 heads but x has 3"):
        apply_rope(x, cos[:, :2], sin[:, :2], layout)


def test_cos_sin_of_another_head_dim_are_named():
    """A rotation of 4 pairs does not fit a 6-channel head: named, not a 4-wide result or
    torch's shape error (the cos/sin of another RoPE)."""
    cos, sin = rope_cos_sin(torch.arange(3), rope_inv_freq(8)[0])  # 4 pairs
    with pytest.raises(ValueError, match=r"cos and sin rotate 4 pairs .* x has 6 channels"):
        apply_rope(torch.randn(1, 1, 3, 6), cos, sin)
    with pytest.raises(ValueError, match="cos and sin must have one shape"):
        apply_rope(torch.randn(1, 1, 3, 8), cos, sin[:2])


def test_integer_x_and_mixed_devices_are_named():
    cos, sin = rope_cos_sin(torch.arange(3), rope_inv_freq(8)[0])
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        apply_rope(torch.ones(1, 1, 3, 8, dtype=torch.long), cos, sin)
    with pytest.raises(ValueError, match="x, cos and sin must be on one device"):
        apply_rope(torch.randn(1, 1, 3, 8, device="meta"), cos, sin)


def test_inv_freq_arguments_are_named():
    with pytest.raises(ValueError, match="base must be > 1"):
        rope_inv_freq(8, base=0.5)
    with pytest.raises(ValueError, match="rotary_dim must be <= 8"):
        rope_inv_freq(8, rotary_dim=10)
    with pytest.raises(TypeError, match="seq_len must be an int"):
        rope_inv_freq(8, seq_len=1.5)
    with pytest.raises(ValueError, match="attention_factor must be > 0"):
        rope_cos_sin(torch.arange(3), rope_inv_freq(8)[0], attention_factor=0.0)
