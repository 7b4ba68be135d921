"""xPos (Sun et al. 2022, arXiv:2212.10554): RoPE with a per-pair decay ζ_i^((n - m)/512)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.test_host_reads import reads
from torch.testing import assert_close

import posenc
import posenc.rotary.xpos  # registers "xpos"
from posenc.functional import rope_cos_sin, rope_inv_freq
from posenc.models import TransformerLM
from posenc.rotary.xpos import (
    XPos,
    check_xpos_positions,
    xpos_max_distance,
    xpos_scale,
    xpos_zeta,
)


def naive_xpos(
    x, positions, *, key, layout="half", base=10000.0, scale_base=512.0, center=0.0, rotary_dim=None
):
    """The paper's formula, one pair at a time: rotate pair i by n·θ_i, then multiply it by
    ζ_i^((n - c)/scale_base) (a query) or ζ_i^(-(n - c)/scale_base) (a key)."""
    d = rotary_dim or x.shape[-1]
    out = x.clone()
    for b in range(x.shape[0]):
        for h in range(x.shape[1]):
            for s in range(x.shape[2]):
                n = float(positions[s])
                for i in range(d // 2):
                    j1, j2 = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
                    theta = base ** (-2 * i / d)
                    zeta = (2 * i + 0.4 * d) / (1.4 * d)
                    factor = zeta ** ((n - center) / scale_base * (-1 if key else 1))
                    x1, x2 = float(x[b, h, s, j1]), float(x[b, h, s, j2])
                    c, sn = math.cos(n * theta), math.sin(n * theta)
                    out[b, h, s, j1] = (x1 * c - x2 * sn) * factor
                    out[b, h, s, j2] = (x2 * c + x1 * sn) * factor
    return out


def score_tol(tol, q2, k2):
    """Scores of xPos-rotated float32 q and k: each entry is the rotation (three roundings)
    times the decay factor, formed in float64 and rounded once (one more, however large its
    exponent), and a score sums head_dim products of two such entries."""
    size = (q2.abs() @ k2.abs().transpose(-1, -2)).max().item()  # the largest Σ|q_l k_l|
    return tol(n=q2.shape[-1] + 2 * 5, scale=size)


def pair_of_dim(head_dim, layout, rotary_dim=None):
    """The pair index of every rotating dimension. Shapes: ``[rotary_dim]``."""
    n = (rotary_dim or head_dim) // 2
    pairs = torch.arange(n)
    return torch.cat((pairs, pairs)) if layout == "half" else pairs.repeat_interleave(2)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    "config",
    [{}, {"center": 300.0, "scale_base": 64.0, "base": 500.0}, {"rotary_dim": 4}],
    ids=["default", "centred", "partial"],
)
def test_equals_the_paper_formula_pair_by_pair(layout, config, tol):
    xpos = XPos(head_dim=8, layout=layout, **config)
    q, k = (
        torch.randn(2, 2, 5, 8, dtype=torch.float64),
        torch.randn(2, 1, 5, 8, dtype=torch.float64),
    )
    positions = torch.tensor([0, 1, 7, 250, 1000])
    q2, k2 = xpos(q, k, positions=positions.double())  # float64 positions: float64 tables
    for x, x2, key in ((q, q2, False), (k, k2, True)):
        expected = naive_xpos(x, positions, key=key, layout=layout, **config)
        assert_close(x2, expected, rtol=1e-10, atol=1e-12)
        out32 = xpos(q.float(), k.float(), positions=positions)[int(key)]
        assert out32.dtype == torch.float32
        # the rotation (three roundings) times a decay formed in float64 and rounded once (two
        # more), relative to |x1| + |x2| times the decay: large exponents cost no digits, as
        # they are float64; the keys' decay is the inverse of the queries'
        decay = xpos.rotation(positions.double())[2]
        largest = max(decay.max().item(), (1 / decay).max().item())
        rounding = tol(n=5, scale=2 * x.abs().max().item() * largest)
        assert_close(out32, expected.float(), **rounding)


def test_zeta_and_scale_values():
    assert_close(xpos_zeta(8), torch.tensor([3.2, 5.2, 7.2, 9.2], dtype=torch.float64) / 11.2)
    assert xpos_zeta(128)[0].item() == pytest.approx(2 / 7)
    scale = xpos_scale(torch.tensor([0, 512, 1024]), xpos_zeta(4), scale_base=512.0, center=512.0)
    assert scale.shape == (3, 2) and scale.dtype == torch.float32
    assert_close(scale[1], torch.ones(2))
    assert_close(scale[0] * scale[2], torch.ones(2))
    assert_close(scale[2], xpos_zeta(4).float())


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_are_rope_scores_times_the_decay(layout):
    """q·k after xPos = Σ_i (RoPE q·k of pair i) · ζ_i^((n - m)/scale_base)."""
    head_dim, scale_base = 16, 32.0
    xpos = XPos(head_dim=head_dim, layout=layout, scale_base=scale_base, center=40.0)
    rope = posenc.create("rope", head_dim=head_dim, layout=layout)
    q, k = (
        torch.randn(1, 2, 9, head_dim, dtype=torch.float64),
        torch.randn(1, 2, 9, head_dim, dtype=torch.float64),
    )
    positions = torch.tensor([0, 3, 4, 10, 40, 41, 80, 200, 511])
    q2, k2 = xpos(q, k, positions=positions.double())  # float64 tables
    qr, kr = rope(q, k, positions=positions.double())
    distance = (positions[:, None] - positions[None, :]).double()  # [n, m]
    zeta = xpos_zeta(head_dim)[pair_of_dim(head_dim, layout)]  # [head_dim]
    decay = zeta ** (distance[..., None] / scale_base)  # [n, m, head_dim]
    expected = torch.einsum("bhnd,bhmd,nmd->bhnm", qr, kr, decay)
    assert_close(q2 @ k2.transpose(-1, -2), expected, rtol=1e-10, atol=1e-12)
    # on the diagonal (n = m) xPos and RoPE agree; below it xPos decays
    diagonal = torch.diagonal(q2 @ k2.transpose(-1, -2), dim1=-2, dim2=-1)
    assert_close(
        diagonal,
        torch.diagonal(qr @ kr.transpose(-1, -2), dim1=-2, dim2=-1),
        rtol=1e-10,
        atol=1e-12,
    )


@given(
    shift=st.integers(0, 20_000),
    center=st.sampled_from([0.0, 1000.0, 16_384.0]),
    layout=st.sampled_from(["half", "interleaved"]),
)
def test_scores_depend_only_on_the_distance(shift, center, layout, tol):
    xpos = XPos(head_dim=8, layout=layout, center=center)
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 1, 6, 8, generator=g), torch.randn(1, 1, 6, 8, generator=g)
    positions = torch.tensor([0, 1, 2, 5, 9, 300])
    q2, k2 = xpos(q, k, positions=positions)
    q3, k3 = xpos(q, k, positions=positions + shift)
    assert_close(q3 @ k3.transpose(-1, -2), q2 @ k2.transpose(-1, -2), **score_tol(tol, q2, k2))


def test_center_changes_no_score(tol):
    q, k = torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    scores = []
    for center in (0.0, 3.0, 500.0, 20_000.0):
        q2, k2 = XPos(head_dim=16, center=center)(q, k)
        scores.append(q2 @ k2.transpose(-1, -2))
        if center == 0.0:
            rounding = score_tol(tol, q2, k2)
    for s in scores[1:]:
        assert_close(s, scores[0], **rounding)


def test_rotation_tables():
    xpos = XPos(head_dim=8)
    positions = torch.tensor([[0, 1, 2], [5, 6, 7]])
    cos, sin, scale = xpos.rotation(positions)
    assert cos.shape == sin.shape == scale.shape == (2, 3, 4)
    assert scale.dtype == torch.float32
    # the module calls this function on the same positions: the same operations
    assert_close(scale, xpos_scale(positions, xpos.zeta(), 512.0, 0.0), rtol=0, atol=0)
    assert xpos.rotation(positions.double())[2].dtype == torch.float64
    # every RoPE option carries over: cos/sin are RoPE's (here YaRN, with its attention factor)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    cos, sin, _ = XPos(head_dim=8, scaling=yarn).rotation(positions)
    rope_cos, rope_sin = posenc.create("rope", head_dim=8, scaling=yarn).rotation(positions)
    # RoPE's own function on the same positions: the same operations
    assert_close(cos, rope_cos, rtol=0, atol=0)
    assert_close(sin, rope_sin, rtol=0, atol=0)


@pytest.mark.parametrize("n_kv_heads", [None, 2], ids=["mha", "gqa"])
def test_kv_cache_generation_equals_recomputation(n_kv_heads, check_cached_decoding, sharpen):
    encoding = {"name": "xpos", "scale_base": 8.0}  # a short decay length: it shows in 14 tokens
    model = sharpen(
        TransformerLM(
            vocab_size=50, dim=32, n_layers=2, n_heads=4, encoding=encoding, n_kv_heads=n_kv_heads
        )
    ).eval()
    cached, full = check_cached_decoding(model, torch.randint(0, 50, (2, 6)), 8)
    # the decay is there: the same model with plain RoPE gives other logits
    rope_model = TransformerLM(
        vocab_size=50, dim=32, n_layers=2, n_heads=4, encoding="rope", n_kv_heads=n_kv_heads
    ).eval()
    rope_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert not torch.allclose(rope_model(cached), full, atol=1e-3)


def test_cached_decoding_far_from_the_start(sharpen, model_tol):
    """Explicit positions near 30k (a fixed centre: cached keys stay consistent)."""
    model = sharpen(
        TransformerLM(vocab_size=50, dim=32, n_layers=2, n_heads=4, encoding="xpos")
    ).eval()
    ids = torch.randint(0, 50, (1, 10))
    positions = torch.arange(10) + 30_000
    with torch.no_grad():
        full = model(ids, positions=positions)
        cache = model.new_cache(1, 10)
        steps = [model(ids[:, :4], positions=positions[:4], cache=cache)]
        steps += [
            model(ids[:, i : i + 1], positions=positions[i : i + 1], cache=cache)
            for i in range(4, 10)
        ]
        assert torch.isfinite(full).all()
        rounding = model_tol(model, 10, full)
        assert_close(torch.cat(steps, dim=1), full, **rounding)
        assert_close(full, model(ids), **rounding)  # relative: the shift changes nothing


def test_positions_past_the_range_raise():
    xpos = XPos(head_dim=8)
    limit = xpos_max_distance(512.0, torch.float32)
    assert 33_000 < limit < 34_000
    assert xpos_max_distance(64.0) == pytest.approx(limit / 8)
    q = torch.randn(1, 1, 2, 8)
    edge = torch.tensor([0, int(limit)])
    q2, k2 = xpos(q, q, positions=edge)
    assert torch.isfinite(q2).all() and torch.isfinite(k2).all()
    assert (q2[..., 1, :] != 0).all() and (k2[..., 1, :] != 0).all()
    with pytest.raises(
        ValueError, match=r"position 33712 is 33712 from center=0.*\[-33711, 33711\]"
    ):
        xpos(q, q, positions=edge + 1)
    # a centre moves the window
    far = XPos(head_dim=8, center=50_000.0)
    q3, k3 = far(q, q, positions=torch.tensor([20_000, 80_000]))
    assert torch.isfinite(q3).all() and torch.isfinite(k3).all()
    with pytest.raises(ValueError, match="position 0 is 50000 from center=50000"):
        far(q, q, positions=torch.tensor([0, 1]))


def test_float16_inputs_have_a_narrower_range():
    xpos = XPos(head_dim=8)
    assert 1900 < xpos_max_distance(512.0, torch.float16) < 2000
    q = torch.randn(1, 1, 2, 8, dtype=torch.float16)
    ok = torch.tensor([0, 1900])
    assert all(torch.isfinite(t).all() for t in xpos(q, q, positions=ok))
    with pytest.raises(ValueError, match=r"torch\.float16 inputs hold 2\^±7\.0.*bfloat16"):
        xpos(q, q, positions=torch.tensor([0, 3000]))
    for dtype in (torch.bfloat16, torch.float32):  # the float32 window
        q2, k2 = xpos(q.to(dtype), q.to(dtype), positions=torch.tensor([0, 30_000]))
        assert torch.isfinite(q2).all() and torch.isfinite(k2).all()


def test_check_xpos_positions_reads_once_and_names_the_window():
    limit = xpos_max_distance(512.0, torch.float32)
    assert len(reads(lambda: check_xpos_positions(torch.tensor([0, int(limit)]), 512.0))) == 1
    with pytest.raises(ValueError, match="center"):
        check_xpos_positions(torch.tensor([0, int(limit) + 1]), 512.0, 0.0)
    check_xpos_positions(torch.tensor([int(limit) + 1]), 512.0, 10.0)
    with posenc.validation(False):  # no read: nothing refused
        assert reads(lambda: check_xpos_positions(torch.tensor([0, 10**6]), 512.0)) == []
    with pytest.raises(TypeError, match=r"dtype must be a floating torch\.dtype"):
        check_xpos_positions(torch.tensor([0]), 512.0, 0.0, torch.int64)


def test_rotate_in_float16_names_factors_it_cannot_hold():
    """The factor check left the pure math for the module's rotate: one read, refused by
    name before anything is computed; none with validation off."""
    xpos = XPos(head_dim=4)
    x = torch.randn(1, 1, 1, 4, dtype=torch.float16)
    positions = torch.tensor([5000])
    cos, sin = rope_cos_sin(positions, rope_inv_freq(4)[0])
    rotation = (cos, sin, xpos_scale(positions, xpos_zeta(4)))
    with pytest.raises(ValueError, match=r"float16 inputs hold 2\^±7\.0"):
        xpos.rotate(x, rotation, key=True)
    with posenc.validation(False):
        assert reads(lambda: xpos.rotate(x, rotation, key=True)) == []
    near = torch.tensor([100])
    cos, sin = rope_cos_sin(near, rope_inv_freq(4)[0])
    rotation = (cos, sin, xpos_scale(near, xpos_zeta(4)))
    assert len(reads(lambda: xpos.rotate(x, rotation, key=True))) == 1
    assert reads(lambda: xpos.rotate(x.float(), rotation)) == []  # float32 holds the table's


def test_config_and_info():
    info = posenc.info("xpos")
    assert info.kind == "rotary" and info.relative and not info.trainable
    assert "2212.10554" in info.reference
    xpos = posenc.create("xpos", head_dim=8, scale_base=256.0, center=100.0, layout="interleaved")
    assert isinstance(xpos, XPos)
    assert xpos.config.to_dict()["scale_base"] == 256.0
    with pytest.raises(ValueError, match="scale_base must be > 0"):
        XPos(head_dim=8, scale_base=0.0)
    with pytest.raises(ValueError, match="center must be >= 0"):
        XPos(head_dim=8, center=-1.0)
    with pytest.raises(ValueError, match="center must be finite"):
        XPos(head_dim=8, center=float("inf"))
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['gamma'\]"):
        posenc.create("xpos", head_dim=8, gamma=0.5)


def _rotate_cases():
    """(x, rotation, error, match) of a head-8 xPos (4 pairs), 3 tokens, a batch of 2."""
    xpos, positions = XPos(head_dim=8), torch.arange(3)
    x = torch.randn(2, 2, 3, 8)
    cos, sin, scale = xpos.rotation(positions)
    tables = r"rotation must be XPos's tables for x's positions \(\[seq, 4\]"
    return [
        (x, (cos, sin), ValueError, "rotation must be the 3 tables .*, got 2"),  # RoPE's
        (x, None, TypeError, "rotation must be the tuple .* got NoneType"),
        (x, (cos, sin, scale[:2]), ValueError, tables),
        (x, XPos(head_dim=16).rotation(positions), ValueError, tables),
        (x, (cos, sin, scale.tolist()), TypeError, "rotation's tables must be a floating"),
        (x[..., :4], (cos, sin, scale), ValueError, "x must be .* head_dim=8"),
    ]


@pytest.mark.parametrize("case", range(len(_rotate_cases())))
def test_rotate_refuses_by_name_what_is_not_its_rotation_of_x(case):
    """RoPE's (cos, sin) failed unpacking in Python; the check is RoPE's rotate's."""
    x, rotation, error, match = _rotate_cases()[case]
    with pytest.raises(error, match=match):
        XPos(head_dim=8).rotate(x, rotation, key=True)
