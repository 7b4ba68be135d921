"""Axial 2-D RoPE (``rope_2d``) and RoPE-Mixed (``rope_mixed``), Heo et al. 2024,
arXiv:2403.13298: against per-pair loops of the paper's formulas in float64, against
Hugging Face DINOv3's 2-D RoPE, and by their properties (scores depend on (dy, dx) only)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import posenc
from posenc.functional.axial_rope import (
    axial_rope_cos_sin,
    axial_rope_inv_freq,
    rope_mixed_cos_sin,
    rope_mixed_freqs,
)
from posenc.positions import grid, grid_default_positions
from posenc.rotary.axial import RoPE2D, RoPEMixed


def pair_dims(i, d, layout):
    return (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)


def rotate_pairs(x, angle_of):
    """Rotate every pair of ``x`` ``[b, h, s, d]`` by ``angle_of(b, h, s, i)`` radians, one
    explicit 2x2 rotation at a time, in float64. ``angle_of`` also gets the pair's dims."""
    x = x.double()
    out = x.clone()
    batch, heads, seq, d = x.shape
    for b in range(batch):
        for h in range(heads):
            for s in range(seq):
                for i in range(d // 2):
                    j1, j2, angle = angle_of(b, h, s, i)
                    c, sn = math.cos(angle), math.sin(angle)
                    x1, x2 = float(x[b, h, s, j1]), float(x[b, h, s, j2])
                    out[b, h, s, j1] = x1 * c - x2 * sn
                    out[b, h, s, j2] = x2 * c + x1 * sn
    return out


def coord(positions, b, s):
    """(row, column) of token s of sequence b, for ``[seq, 2]`` or ``[batch, seq, 2]``."""
    p = positions if positions.dim() == 2 else positions[b]
    return float(p[s, 0]), float(p[s, 1])


def naive_axial(x, positions, base=100.0, layout="half", axis_order="xy", coord_scale=1.0):
    """Pair i < d/4 rotates by the first axis' coordinate · base^(-4i/d), pair d/4 + i by
    the second's: x (column) first for "xy", y (row) first for "yx"."""
    d = x.shape[-1]
    quarter = d // 4

    def angle_of(b, h, s, i):
        y, xc = coord(positions, b, s)
        first, second = (xc, y) if axis_order == "xy" else (y, xc)
        c = first if i < quarter else second
        theta = base ** (-4 * (i % quarter) / d)
        return (*pair_dims(i, d, layout), coord_scale * c * theta)

    return rotate_pairs(x, angle_of)


def naive_mixed(x, positions, freqs, layout="half", sets=None):
    """Pair i of head h rotates by x·f_x[set, i] + y·f_y[set, i], set = ``sets[h]``."""
    d = x.shape[-1]
    freqs = freqs.double()
    sets = sets or list(range(x.shape[1]))

    def angle_of(b, h, s, i):
        y, xc = coord(positions, b, s)
        angle = xc * float(freqs[0, sets[h], i]) + y * float(freqs[1, sets[h], i])
        return (*pair_dims(i, d, layout), angle)

    return rotate_pairs(x, angle_of)


# a grid, batched grids, far integer coordinates, negative and normalised float coordinates
POSITIONS = {
    "grid": grid(2, 3, prefix=1),
    "batched": torch.stack((grid(2, 3), grid(2, 3) + torch.tensor([40, -7]))),
    "far": torch.tensor([[0, 0], [1_000_000, 3], [-5, 2_000_000], [123_456, 654_321]]),
    "float": torch.cat((grid(2, 2, normalize=True), torch.tensor([[-3.25, 0.5]]))),
}


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("axis_order", ["xy", "yx"])
@pytest.mark.parametrize("case", list(POSITIONS))
def test_rope_2d_equals_the_formula_pair_by_pair(layout, axis_order, case, tol):
    positions = POSITIONS[case]
    batch = positions.shape[0] if positions.dim() == 3 else 2
    seq = positions.shape[-2]
    rope = RoPE2D(head_dim=8, layout=layout, axis_order=axis_order)
    q, k = torch.randn(batch, 2, seq, 8), torch.randn(batch, 1, seq, 8)  # GQA keys
    q2, k2 = rope(q, k, positions=positions)
    assert q2.dtype == k2.dtype == torch.float32
    # float64 angles rounded once: exact to float32 even at coordinates of 10^6, so three
    # float32 roundings (the table entry, the products, their sum) of terms up to 2·max|x|
    rounding = tol(n=3, scale=2 * max(q.abs().max(), k.abs().max()))
    expected_q = naive_axial(q, positions, layout=layout, axis_order=axis_order)
    assert_close(q2.double(), expected_q, **rounding)
    expected_k = naive_axial(k, positions, layout=layout, axis_order=axis_order)
    assert_close(k2.double(), expected_k, **rounding)
    q64, _ = rope(q.double(), k.double(), positions=positions.double())
    assert q64.dtype == torch.float64
    expected = naive_axial(q, positions, layout=layout, axis_order=axis_order)
    assert_close(q64, expected, rtol=0, atol=1e-9)


def test_rope_2d_base_and_coord_scale():
    rope = RoPE2D(head_dim=16, base=37.0, coord_scale=0.3, layout="interleaved")
    positions = torch.tensor([[2, 5], [-1, 7], [3, 3]])
    q = torch.randn(1, 2, 3, 16, dtype=torch.float64)
    expected = naive_axial(q, positions, base=37.0, coord_scale=0.3, layout="interleaved")
    assert_close(rope(q, q, positions=positions)[0], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("axis_order", ["xy", "yx"])
def test_axis_order_decides_which_half_follows_the_column(axis_order):
    """Moving along a row (column changes) rotates the first half of the pairs for "xy" and
    the second half for "yx"; the other half is untouched (half layout: pairs i, i + d/2)."""
    rope = RoPE2D(head_dim=16, axis_order=axis_order)
    q = torch.randn(1, 1, 2, 16, dtype=torch.float64)
    out = rope(q, q, positions=torch.tensor([[0, 0], [0, 5]]))[0]
    moved = (out[0, 0, 1] - q[0, 0, 1]).abs().view(2, 2, 4)  # [half, x1/x2, quarter]
    first, second = moved[:, 0].amax(), moved[:, 1].amax()
    if axis_order == "xy":
        assert first > 1e-2 and second == 0
    else:
        assert second > 1e-2 and first == 0


def test_module_equals_the_functions():
    rope = posenc.create("rope_2d", head_dim=8, base=50.0, axis_order="yx", coord_scale=2.0)
    positions = grid(3, 2, prefix=2)
    cos, sin = rope.rotation(positions)
    inv_freq = axial_rope_inv_freq(8, 50.0, 2.0)
    expected = axial_rope_cos_sin(positions, inv_freq, "yx")
    # the module calls this function on the same inputs: the same operations
    assert_close(cos, expected[0], rtol=0, atol=0)
    assert_close(sin, expected[1], rtol=0, atol=0)
    assert cos.shape == (8, 4) and cos.dtype == torch.float32


# the relative property ---------------------------------------------------------------------


def scores_at(rope, q, k, q_positions, k_positions):
    """⟨R(p) q, R(p') k⟩ per head for each pair (p, p') of rows: ``[heads, pairs]``."""
    n = q_positions.shape[0]
    qs = q.expand(-1, -1, n, -1)  # the same vectors at every position: [1, h, n, d]
    ks = k.expand(-1, -1, n, -1)
    q2, k2 = rope(qs, ks, positions=q_positions, k_positions=k_positions)
    return (q2 * k2).sum(-1)[0]


def make_encodings():
    rope_2d = RoPE2D(head_dim=16, layout="interleaved")
    mixed = RoPEMixed(head_dim=16, n_heads=3)
    with torch.no_grad():  # trained frequencies need not keep the initial structure
        mixed.freqs.normal_()
    return {"rope_2d": rope_2d, "rope_mixed": mixed}


@pytest.mark.parametrize("name", ["rope_2d", "rope_mixed"])
@given(
    dy=st.integers(-30, 30),
    dx=st.integers(-30, 30),
    fractional=st.booleans(),
)
def test_scores_depend_only_on_the_offset(name, dy, dx, fractional):
    """⟨R(p) q, R(p') k⟩ is the same for 64 random p' with p - p' = (dy, dx), and changes
    when the offset does."""
    rope = make_encodings()[name]
    generator = torch.Generator().manual_seed((dy + 50) * 100 + dx + 50)
    q = torch.randn(1, 3, 1, 16, dtype=torch.float64, generator=generator)
    k = torch.randn(1, 3, 1, 16, dtype=torch.float64, generator=generator)
    k_positions = torch.randint(-50, 50, (64, 2), generator=generator).double()
    if fractional:
        k_positions = k_positions * 0.37
    offset = torch.tensor([dy, dx], dtype=torch.float64)
    scores = scores_at(rope, q, k, k_positions + offset, k_positions)  # [h, 64]
    assert_close(scores, scores[:, :1].expand_as(scores), rtol=1e-9, atol=1e-9)
    for other in ([dy + 1, dx], [dy, dx + 1], [dx, dy] if dx != dy else [dy, -dx - 1]):
        moved = scores_at(rope, q, k, k_positions + torch.tensor(other).double(), k_positions)
        assert (moved - scores).abs().max() > 1e-3


def test_rope_2d_tells_the_axes_apart():
    """The axes are told apart: a step down (1, 0) and a step right (0, 1) give different
    scores (an encoding of the sum y + x would not)."""
    rope = RoPE2D(head_dim=16)
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    base = torch.tensor([[0, 0]])
    down = scores_at(rope, q, k, torch.tensor([[1, 0]]), base)
    right = scores_at(rope, q, k, torch.tensor([[0, 1]]), base)
    assert (down - right).abs().max() > 1e-3


# RoPE-Mixed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_mixed_equals_the_formula_pair_by_pair(layout, tol):
    rope = RoPEMixed(head_dim=8, n_heads=4, n_kv_heads=2, layout=layout)
    with torch.no_grad():
        rope.freqs.normal_()
    positions = torch.stack(
        (grid(2, 2, prefix=1), torch.tensor([[3, -2], [0, 9], [7, 7], [-1, 0], [4, 1]]))
    )
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8)
    q2, k2 = rope(q, k, positions=positions)
    freqs = rope.freqs.detach()
    # float64 angles rounded once, then three float32 roundings of terms up to 2·max|x|
    rounding = tol(n=3, scale=2 * max(q.abs().max(), k.abs().max()))
    # query head h rotates with the frequencies of its key head, h // 2
    expected_q = naive_mixed(q, positions, freqs, layout, sets=[0, 0, 1, 1])
    assert_close(q2.double(), expected_q, **rounding)
    assert_close(k2.double(), naive_mixed(k, positions, freqs, layout), **rounding)
    # keys repeated to every query head rotate like the queries of their group
    k_rep = k.repeat_interleave(2, dim=1)
    got = rope(q, k_rep, positions=positions)[1]
    assert_close(got, k2.repeat_interleave(2, dim=1), **rounding)


def test_rope_mixed_angles_are_exact_at_far_coordinates(tol):
    """The angle x·f_x + y·f_y is formed in float64 from the float32 parameters: at
    coordinates of 10^5 a float32 product would be off by ~10^-2 rad."""
    rope = RoPEMixed(head_dim=8, n_heads=2)
    positions = torch.tensor([[100_003, 99_991], [-77_777, 12_345]])
    q = torch.randn(1, 2, 2, 8)
    expected = naive_mixed(q, positions, rope.freqs.detach())
    rounding = tol(n=3, scale=2 * q.abs().max())  # as in the pair-by-pair tests
    assert_close(rope(q, q, positions=positions)[0].double(), expected, **rounding)
    fx, fy = rope.freqs.detach()[..., None, :]  # [heads, 1, pairs] each
    y, x = positions[:, 0, None], positions[:, 1, None]  # [seq, 1] each
    float32_angle = x.float() * fx + y.float() * fy
    exact = x.double() * fx.double() + y.double() * fy.double()
    assert (float32_angle.double() - exact).abs().max() > 1e-3


def test_rope_mixed_at_phase_zero_is_axial_rope_with_base_10():
    """With φ = 0 the first quarter of the pairs follows x and the second y, with the axial
    magnitudes: RoPE-Mixed starts from rope_2d (base 10, column first) turned per head."""
    mixed = RoPEMixed(head_dim=16, n_heads=2, layout="interleaved", dtype=torch.float64)
    with torch.no_grad():
        mixed.freqs.copy_(rope_mixed_freqs(torch.zeros(2, dtype=torch.float64), 16))
    axial = RoPE2D(head_dim=16, base=10.0, layout="interleaved")
    positions = torch.cat((grid(3, 3), torch.tensor([[-4, 11]])))
    q = torch.randn(2, 2, 10, 16, dtype=torch.float64)
    expected = axial(q, q, positions=positions.double())[0]  # float64 tables
    assert_close(mixed(q, q, positions=positions)[0], expected, rtol=0, atol=1e-12)


def test_rope_mixed_initialisation(tol):
    """freqs ``[2, heads, d/2]`` as the paper's code: pair i and pair d/4 + i have the
    magnitude m_i = 10^(-4i/d) exactly, along the directions φ_h and φ_h + π/2."""
    head_dim, heads = 32, 4000
    rope = RoPEMixed(head_dim=head_dim, n_heads=heads)
    freqs = rope.freqs.detach()
    assert freqs.shape == (2, heads, head_dim // 2) and freqs.dtype == torch.float32
    assert rope.freqs.requires_grad
    fx, fy = freqs.double()
    mag = torch.tensor(
        [10 ** (-4 * i / head_dim) for i in range(head_dim // 4)] * 2, dtype=torch.float64
    )
    # float64 math on float32 magnitudes, rounded to float32: a few float32 roundings
    few = tol(n=4, scale=0)
    assert_close((fx**2 + fy**2).sqrt(), mag.expand(heads, -1), **few)
    # one phase per head: pair 0 points along φ_h, pair d/4 along φ_h + π/2, and every
    # pair of a quarter shares the direction
    phi = torch.atan2(fy[:, 0], fx[:, 0])  # [heads]
    quarter = head_dim // 4
    turned = torch.atan2(fy[:, quarter], fx[:, quarter])
    # rounding fx and fy to float32 turns each direction by at most eps/2
    assert_close(
        torch.remainder(turned - phi, 2 * math.pi),
        torch.full_like(phi, math.pi / 2),
        **tol(n=2, scale=1),
    )
    assert_close(fx[:, :quarter] / mag[:quarter], phi.cos()[:, None].expand(-1, quarter), **few)
    # φ ~ U(0, 2π): 8 equal bins hold 500 ± 5σ (σ ≈ 21) heads each
    counts = torch.histc(torch.remainder(phi, 2 * math.pi), bins=8, min=0, max=2 * math.pi)
    assert ((counts - heads / 8).abs() < 5 * math.sqrt(heads / 8 * 7 / 8)).all()


def test_rope_mixed_draws_from_the_global_rng(tol):
    torch.manual_seed(7)
    a = RoPEMixed(head_dim=8, n_heads=3)
    torch.manual_seed(7)
    b = RoPEMixed(head_dim=8, n_heads=3)
    assert torch.equal(a.freqs, b.freqs)
    before = a.freqs.detach().clone()
    a.reset_parameters()  # re-drawn: new phases, same magnitudes
    assert (a.freqs - before).abs().max() > 1e-3
    # each norm: float32 components of the same magnitude, squared, added, square-rooted
    assert_close(a.freqs.norm(dim=0), before.norm(dim=0), **tol(n=4, scale=1))


def test_gradients_reach_the_frequencies():
    rope = RoPEMixed(head_dim=8, n_heads=2)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    q2, k2 = rope(q, k, positions=grid(2, 3))
    (q2 @ k2.transpose(-1, -2)).square().sum().backward()
    assert rope.freqs.grad is not None and (rope.freqs.grad != 0).all()
    # against finite differences, in float64 (the parameters cast as gradcheck does)
    freqs = rope.freqs.detach().double().requires_grad_()
    q64, k64 = q.double().requires_grad_(), k.double().requires_grad_()

    def fn(q, k, f):
        return torch.func.functional_call(
            rope, {"freqs": f}, (q, k), {"positions": torch.tensor([[1, 2], [-3, 0.5]] * 3)}
        )

    assert torch.autograd.gradcheck(fn, (q64, k64, freqs))


# prefix tokens, default positions, attention -----------------------------------------------


@pytest.mark.parametrize("name", ["rope_2d", "rope_mixed"])
def test_prefix_tokens_are_not_rotated(name):
    extra = {"n_heads": 2} if name == "rope_mixed" else {}
    enc = posenc.create(name, head_dim=8, grid=(2, 2), prefix=2, **extra)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    q2, k2 = enc(q, k)
    assert torch.equal(q2[:, :, :2], q[:, :, :2]) and torch.equal(k2[:, :, :2], k[:, :, :2])
    assert (q2[:, :, 3:] - q[:, :, 3:]).abs().max() > 1e-3  # the patches after (0, 0) turn


def test_default_positions_follow_the_configured_grid():
    rope = RoPE2D(head_dim=8, grid=(2, 3), prefix=1)
    assert torch.equal(rope.default_positions(7), grid(2, 3, prefix=1))
    assert torch.equal(rope.default_positions(3, offset=4), grid(2, 3, prefix=1)[4:])
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 7, 8)  # the last 3 queries of 7 keys
    q2, k2 = rope(q, k)
    assert torch.equal(q2, rope(q, q, positions=grid(2, 3, prefix=1)[4:])[0])
    assert torch.equal(k2, rope(k, k, positions=grid(2, 3, prefix=1))[0])
    with pytest.raises(
        ValueError, match=r"grid=\(2, 3\) and prefix=1.*cover 7 tokens.*pass positions"
    ):
        rope(torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))
    with pytest.raises(ValueError, match=r"rope_mixed has no grid configured.*pass positions="):
        RoPEMixed(head_dim=8, n_heads=2)(torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))
    config = RoPE2D.Config(head_dim=8, grid=[4, 4])  # a list is kept as a tuple
    assert config.grid == (4, 4)
    assert grid_default_positions(config, 16).shape == (16, 2)


@pytest.mark.parametrize("name", ["rope_2d", "rope_mixed"])
def test_attention_equals_a_dense_reference(name, dense_attention, attention_tol):
    h, w, prefix = 3, 4, 1
    positions = grid(h, w, prefix=prefix)
    seq = positions.shape[0]
    if name == "rope_2d":
        enc = posenc.create(name, head_dim=16, layout="interleaved")
    else:
        enc = posenc.create(name, head_dim=16, n_heads=4, n_kv_heads=2)
    q, k, v = torch.randn(2, 4, seq, 16), torch.randn(2, 2, seq, 16), torch.randn(2, 2, seq, 16)
    out = posenc.attention(q, k, v, encoding=enc, q_positions=positions, causal=False)
    if name == "rope_2d":
        q_ref = naive_axial(q, positions, layout="interleaved")
        k_ref = naive_axial(k, positions, layout="interleaved")
    else:
        freqs = enc.freqs.detach()
        q_ref = naive_mixed(q, positions, freqs, sets=[0, 0, 1, 1])
        k_ref = naive_mixed(k, positions, freqs)
    expected = dense_attention(q_ref, k_ref, v)
    # the float32 rotations add three roundings to each score term
    rounding = attention_tol(q_ref.float(), k_ref.float(), v, extra_n=6)
    assert_close(out.double(), expected, **rounding)
    # the check has teeth: unrotated attention differs
    assert (dense_attention(q, k, v) - expected).abs().max() > 1e-2


# bad inputs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rope_2d", "rope_mixed"])
def test_bad_positions(name):
    enc = posenc.create(name, head_dim=8, **({"n_heads": 2} if name == "rope_mixed" else {}))
    q = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match=r"positions must be \[seq, 2\] or \[batch, seq, 2\]"):
        enc(q, q, positions=torch.arange(6))  # flat 1-D positions
    with pytest.raises(ValueError, match=r"positions must be \[seq, 2\].*got shape \(6, 3\)"):
        enc(q, q, positions=torch.zeros(6, 3))
    with pytest.raises(ValueError, match=r"positions has 5 positions \(rows\).*sequence has 6"):
        enc(q, q, positions=grid(1, 5))
    with pytest.raises(ValueError, match=r"positions must be finite"):
        enc(q, q, positions=torch.full((6, 2), float("nan")))
    with pytest.raises(TypeError, match=r"torch\.bool"):
        enc(q, q, positions=torch.ones(6, 2, dtype=torch.bool))


@pytest.mark.parametrize(
    ("name", "config", "match"),
    [
        ("rope_2d", {"head_dim": 6}, "head_dim must be a multiple of 4"),
        ("rope_mixed", {"head_dim": 10, "n_heads": 2}, "head_dim must be a multiple of 4"),
        ("rope_2d", {"head_dim": 8, "axis_order": "rc"}, "axis_order must be one of"),
        ("rope_2d", {"head_dim": 8, "layout": "neox"}, "layout must be one of"),
        ("rope_2d", {"head_dim": 8, "base": 1.0}, "base must be > 1"),
        ("rope_2d", {"head_dim": 8, "coord_scale": 0.0}, "coord_scale must be > 0"),
        ("rope_2d", {"head_dim": 8, "grid": (2, 3, 4)}, r"grid must be a pair \(h, w\)"),
        ("rope_2d", {"head_dim": 8, "grid": (0, 3)}, "grid h must be >= 1"),
        ("rope_2d", {"head_dim": 8, "prefix": -1}, "prefix must be >= 0"),
        ("rope_mixed", {"head_dim": 8}, r"missing required config key\(s\) \['n_heads'\]"),
        ("rope_mixed", {"head_dim": 8, "n_heads": 4, "n_kv_heads": 3}, "multiple of n_kv_heads"),
    ],
)
def test_bad_config(name, config, match):
    with pytest.raises(ValueError, match=match):
        posenc.create(name, **config)


def test_rope_mixed_head_counts():
    rope = RoPEMixed(head_dim=8, n_heads=4, n_kv_heads=2)
    positions = grid(2, 2)
    q, k = torch.randn(1, 4, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="q has 2 heads but rope_mixed has n_heads=4"):
        rope(k, k, positions=positions)
    with pytest.raises(ValueError, match=r"k has 1 heads but rope_mixed has n_kv_heads=2"):
        rope(q, k[:, :1], positions=positions)
    plain = RoPEMixed(head_dim=8, n_heads=4)
    with pytest.raises(ValueError, match="for grouped-query attention set n_kv_heads"):
        plain(q, k, positions=positions)


# Hugging Face DINOv3 -----------------------------------------------------------------------


def dinov3_setup(h=3, w=5, prefix=3, patch=4, heads=2, hidden=32):
    """A tiny random DINOv3 ViT config and the posenc encoding of its 2-D RoPE: base 100,
    the row first, half layout, patch-centre coordinates in [-1, 1] times 2π."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dinov3

    config = transformers.DINOv3ViTConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_hidden_layers=1,
        intermediate_size=64,
        patch_size=patch,
        image_size=(h * patch, w * patch),
        num_register_tokens=prefix - 1,
        key_bias=True,
    )
    rope = posenc.create(
        "rope_2d", head_dim=hidden // heads, base=100.0, axis_order="yx", coord_scale=2 * math.pi
    )
    hf_rope = dinov3.DINOv3ViTRopePositionEmbedding(config).eval()  # no coordinate jitter
    cos, sin = hf_rope(torch.zeros(1, 3, h * patch, w * patch))  # [h * w, head_dim]
    return dinov3, config, rope, (cos, sin), grid(h, w, prefix, normalize=True)


def test_dinov3_tables_are_rope_2d_yx_on_normalised_grids(tol):
    _, config, rope, (hf_cos, hf_sin), positions = dinov3_setup()
    cos, sin = rope.rotation(positions)  # [prefix + h * w, head_dim / 2]
    prefix = config.num_register_tokens + 1
    # DINOv3 repeats the half table for rotate_half: [rows..., cols..., rows..., cols...]
    # It forms its angles (up to 2π) in float32, a few roundings each, then takes cos/sin
    angles = tol(n=6, scale=2 * math.pi)
    assert_close(hf_cos, cos[prefix:].repeat(1, 2), **angles)
    assert_close(hf_sin, sin[prefix:].repeat(1, 2), **angles)
    # the default options (column first, unscaled coordinates) are not DINOv3's
    default = RoPE2D(head_dim=16).rotation(positions)[1][prefix:].repeat(1, 2)
    assert (default - hf_sin).abs().max() > 0.1


def test_dinov3_attention_layer_parity(attention_tol):
    """DINOv3's attention (its q/k/v projections and 2-D RoPE, prefix tokens unrotated) equals
    posenc.attention with rope_2d over grid(h, w, prefix, normalize=True)."""
    dinov3, config, rope, position_embeddings, positions = dinov3_setup()
    attn = dinov3.DINOv3ViTAttention(config).eval()
    seq, heads, head_dim = positions.shape[0], config.num_attention_heads, rope.head_dim
    hidden = torch.randn(2, seq, config.hidden_size)
    with torch.no_grad():
        expected = attn(hidden, position_embeddings=position_embeddings)[0]

        def split(proj):  # [b, s, hidden] -> [b, heads, s, head_dim]
            return proj(hidden).view(2, seq, heads, head_dim).transpose(1, 2)

        q, k, v = split(attn.q_proj), split(attn.k_proj), split(attn.v_proj)
        out = posenc.attention(q, k, v, encoding=rope, q_positions=positions, causal=False)
        got = attn.o_proj(out.transpose(1, 2).reshape(2, seq, -1))
        unrotated = attn.o_proj(
            posenc.attention(q, k, v, causal=False).transpose(1, 2).reshape(2, seq, -1)
        )
    # Besides posenc's rotations (three roundings of each entry), DINOv3's tables are off by
    # up to 6·eps·2π (see above), in q and in k, each entry a sum over its pair
    tables = 6 + 2 * 2 * 6 * 2 * math.pi
    rotated = rope(q, k, positions=positions)
    rounding = attention_tol(*rotated, v, extra_n=tables, out_proj=attn.o_proj.weight)
    assert_close(got, expected, **rounding)
    assert (unrotated - expected).abs().max() > 1e-3  # the rotation shows in the output


def test_rope_mixed_tables_shape_and_dtype():
    freqs = torch.randn(2, 3, 4)
    cos, sin = rope_mixed_cos_sin(torch.stack((grid(2, 2), grid(2, 2) + 1)), freqs)
    assert cos.shape == sin.shape == (2, 3, 4, 4) and cos.dtype == torch.float32
    cos64, _ = rope_mixed_cos_sin(grid(2, 2), freqs.double())
    assert cos64.shape == (1, 3, 4, 4) and cos64.dtype == torch.float64
    with pytest.raises(ValueError, match=r"freqs must be \[2, heads, n\]"):
        rope_mixed_cos_sin(grid(2, 2), torch.randn(3, 4))
