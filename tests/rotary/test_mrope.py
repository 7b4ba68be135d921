"""M-RoPE: against transformers' Qwen2-VL and Qwen3-VL rotary embeddings, a naive float64
reference, plain RoPE for text, and its properties (relative in each axis, one axis per pair).

transformers computes angles in float32 and posenc in float64: positions stay below ~64 so
that the float32 angles are exact to ~1e-5 and the comparisons can be tight.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import posenc
from posenc.functional.mrope import default_mrope_section, mrope_axis, mrope_cos_sin
from posenc.functional.rope import rope_inv_freq
from posenc.rotary.mrope import MRoPE

transformers = pytest.importorskip("transformers")
from transformers import Qwen2VLTextConfig, Qwen3VLTextConfig  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import (  # noqa: E402
    Qwen2VLRotaryEmbedding,
    apply_rotary_pos_emb,
)
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding  # noqa: E402

HEAD_DIM = 16  # 8 pairs


def text_config(cls, section, interleaved=False, scaling=None):
    params = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(section)}
    params.update(scaling or {})
    if interleaved:
        params["mrope_interleaved"] = True
    return cls(
        hidden_size=64,
        head_dim=HEAD_DIM,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
        rope_parameters=params,
    )


def duplicated(t):
    """posenc's per-pair ``[..., n]`` as transformers writes it for the half layout."""
    return torch.cat((t, t), dim=-1)


def rotation_tol(tol, x):
    """Two rotations of x by tables of the same angles computed apart (a cos/sin may round
    otherwise in another vector lane): three roundings each of terms up to 2·max|x|."""
    return tol(n=3, scale=2 * x.abs().max().item())


# --- (a) transformers ---

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
}


@pytest.mark.parametrize("scaling", sorted(SCALINGS))
@pytest.mark.parametrize(
    "qwen, section",
    [("qwen2_vl", (2, 3, 3)), ("qwen2_vl", (4, 0, 4)), ("qwen3_vl", (4, 2, 2))],
)
def test_matches_transformers(qwen, section, scaling, tol):
    interleaved = qwen == "qwen3_vl"
    cls, rotary_cls = {
        "qwen2_vl": (Qwen2VLTextConfig, Qwen2VLRotaryEmbedding),
        "qwen3_vl": (Qwen3VLTextConfig, Qwen3VLTextRotaryEmbedding),
    }[qwen]
    hf_rotary = rotary_cls(text_config(cls, section, interleaved, SCALINGS[scaling]))
    ours = posenc.create(
        "mrope",
        head_dim=HEAD_DIM,
        mrope_section=section,
        mrope_interleaved=interleaved,
        scaling=SCALINGS[scaling],
    )
    positions = torch.randint(0, 64, (3, 2, 9))  # [3, batch, seq]
    q, k = torch.randn(2, 4, 9, HEAD_DIM), torch.randn(2, 2, 9, HEAD_DIM)
    cos_hf, sin_hf = hf_rotary(q, positions)
    cos, sin = ours.rotation(positions)
    assert cos.shape == (2, 9, HEAD_DIM // 2) and cos.dtype == torch.float32
    # transformers forms the angles (positions below 64 times frequencies up to 1) in
    # float32 from float32 frequencies (a few ulps off): off by ~4·eps·64 rad, then cos/sin
    # (times an attention factor below 2)
    tables = tol(n=5, scale=2 * 64)
    torch.testing.assert_close(duplicated(cos), cos_hf, **tables)
    torch.testing.assert_close(duplicated(sin), sin_hf, **tables)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos_hf, sin_hf)
    q2, k2 = ours(q, k, positions=positions)
    # those tables times |x1| + |x2| <= 2·max|x|, and the rotation's own three roundings
    rotated = tol(n=5 * 2 * 64 + 3, scale=2 * max(q.abs().max(), k.abs().max()))
    torch.testing.assert_close(q2, q_hf, **rotated)
    torch.testing.assert_close(k2, k_hf, **rotated)


def test_the_comparison_sees_the_sections():
    """A wrong split or layout is caught by the comparison above."""
    hf_rotary = Qwen2VLRotaryEmbedding(text_config(Qwen2VLTextConfig, (2, 3, 3)))
    positions = torch.randint(0, 64, (3, 1, 9))
    cos_hf, _ = hf_rotary(torch.zeros(1), positions)
    for section, interleaved in (((2, 3, 3), False), ((3, 3, 2), False), ((4, 2, 2), True)):
        mrope = posenc.create(
            "mrope", head_dim=HEAD_DIM, mrope_section=section, mrope_interleaved=interleaved
        )
        right = (section, interleaved) == ((2, 3, 3), False)
        assert torch.allclose(duplicated(mrope.rotation(positions)[0]), cos_hf, atol=1e-2) == right


# --- (b) a naive reference ---


def naive_mrope(x, positions, section, interleaved, layout, base=10000.0):
    """Rotate ``x [b, h, s, d]`` pair by pair, in float64 loops, from the papers' rules."""
    b, _, s, d = x.shape
    n = d // 2
    out = x.double().clone()
    for pair in range(n):
        if interleaved:  # Qwen3-VL: t, h, w, t, h, w, ... as long as h and w have pairs left
            if pair % 3 == 1 and pair // 3 < section[1]:
                axis = 1
            elif pair % 3 == 2 and pair // 3 < section[2]:
                axis = 2
            else:
                axis = 0
        else:  # Qwen2-VL: consecutive sections
            axis = 0 if pair < section[0] else 1 if pair < section[0] + section[1] else 2
        theta = base ** (-2 * pair / d)
        i, j = (pair, pair + n) if layout == "half" else (2 * pair, 2 * pair + 1)
        for bi in range(b):
            for si in range(s):
                angle = float(positions[axis, bi, si]) * theta
                c, sn = math.cos(angle), math.sin(angle)
                xi, xj = x[bi, :, si, i].double(), x[bi, :, si, j].double()
                out[bi, :, si, i] = xi * c - xj * sn
                out[bi, :, si, j] = xj * c + xi * sn
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    "section, interleaved", [((2, 3, 3), False), ((1, 5, 2), False), ((4, 2, 2), True)]
)
def test_matches_a_naive_reference(section, interleaved, layout, tol):
    mrope = posenc.create(
        "mrope",
        head_dim=HEAD_DIM,
        mrope_section=section,
        mrope_interleaved=interleaved,
        layout=layout,
    )
    x = torch.randn(2, 3, 5, HEAD_DIM, dtype=torch.float64)
    # far and fractional ids (exact video times): float64 all the way
    positions = torch.rand(3, 2, 5, dtype=torch.float64) * 1e5
    expected = naive_mrope(x, positions, section, interleaved, layout)
    got, _ = mrope(x, x, positions=positions)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, atol=1e-9, rtol=0)
    # integer ids, float32 input: angles in float64, rounded once
    ids = torch.randint(0, 100_000, (3, 2, 5))
    got32, _ = mrope(x.float(), x.float(), positions=ids)
    expected32 = naive_mrope(x, ids, section, interleaved, layout).float()
    torch.testing.assert_close(got32, expected32, **rotation_tol(tol, x))


# --- (c) text is RoPE ---


def test_text_positions_are_plain_rope(tol):
    mrope = posenc.create("mrope", head_dim=HEAD_DIM)
    rope = posenc.create("rope", head_dim=HEAD_DIM)
    q, k = torch.randn(2, 4, 7, HEAD_DIM), torch.randn(2, 2, 7, HEAD_DIM)
    # M-RoPE takes the cos of all three axes' angles ([3, ...]) and picks: the same float64
    # operations, but on other shapes, where a vector lane and the scalar tail may differ
    rounding = rotation_tol(tol, torch.cat((q, k), dim=1))
    for positions in (torch.arange(3, 10), torch.randint(0, 1000, (2, 7))):
        expected = rope(q, k, positions=positions)
        for got in (
            mrope(q, k, positions=positions),
            mrope(q, k, positions=positions.expand(3, 2, 7)),  # equal ids on all three axes
        ):
            assert_close(got[0], expected[0], **rounding)
            assert_close(got[1], expected[1], **rounding)
    assert_close(mrope(q, k)[0], rope(q, k)[0], **rounding)  # default positions: arange


# --- (d) properties ---

AXIS_IDS = st.lists(st.integers(0, 10_000), min_size=3, max_size=3)


@given(shift=AXIS_IDS)
def test_scores_depend_on_id_differences_in_each_axis(shift):
    mrope = posenc.create("mrope", head_dim=HEAD_DIM, mrope_section=(2, 3, 3))
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 6, HEAD_DIM, dtype=torch.float64, generator=generator)
    k = torch.randn(1, 2, 6, HEAD_DIM, dtype=torch.float64, generator=generator)
    positions = torch.randint(0, 50, (3, 1, 6), generator=generator).double()  # float64 cos
    q1, k1 = mrope(q, k, positions=positions)
    q2, k2 = mrope(q, k, positions=positions + torch.tensor(shift).view(3, 1, 1))
    torch.testing.assert_close(q2 @ k2.mT, q1 @ k1.mT, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("interleaved", [False, True])
def test_each_pair_follows_its_own_axis(interleaved):
    section = (4, 2, 2) if interleaved else (2, 3, 3)
    mrope = posenc.create(
        "mrope", head_dim=HEAD_DIM, mrope_section=section, mrope_interleaved=interleaved
    )
    axis = mrope_axis(section, interleaved)
    assert axis.bincount(minlength=3).tolist() == list(section)
    positions = torch.randint(0, 50, (3, 1, 5))
    cos, sin = mrope.rotation(positions)
    for a in range(3):  # the same shapes, each entry in its place: the same operations
        moved = positions.clone()
        moved[a] += 7
        cos_moved, sin_moved = mrope.rotation(moved)
        changed = ((cos_moved != cos) | (sin_moved != sin)).any(dim=1).any(dim=0)  # [n]
        assert torch.equal(changed, axis == a)
        assert torch.equal(cos_moved[..., axis != a], cos[..., axis != a])
        assert torch.equal(sin_moved[..., axis != a], sin[..., axis != a])


def test_norms_are_kept_and_bfloat16_is_rounded_once(tol):
    mrope = posenc.create("mrope", head_dim=HEAD_DIM)
    q = torch.randn(2, 2, 5, HEAD_DIM)
    positions = torch.randint(0, 5000, (3, 2, 5))
    q2, _ = mrope(q, q, positions=positions)
    # a rotation (three roundings of each entry), then a norm: HEAD_DIM squares summed
    norms = q.norm(dim=-1)
    rounding = tol(n=2 * 3 + HEAD_DIM + 2, scale=norms.max().item())
    torch.testing.assert_close(q2.norm(dim=-1), norms, **rounding)
    q_bf16 = q.bfloat16()
    got, _ = mrope(q_bf16, q_bf16, positions=positions)
    assert got.dtype == torch.bfloat16
    # float32 math rounded once: the float32 result rounded, bit for bit
    assert torch.equal(got, mrope(q_bf16.float(), q, positions=positions)[0].bfloat16())


# --- (e) configuration and positions ---


def test_default_sections():
    assert posenc.create("mrope", head_dim=128).config.mrope_section == (16, 24, 24)
    interleaved = posenc.create("mrope", head_dim=128, mrope_interleaved=True)
    assert interleaved.config.mrope_section == (24, 20, 20)
    assert posenc.create("mrope", head_dim=8).config.mrope_section == (2, 1, 1)
    assert posenc.create("mrope", head_dim=16).config.mrope_section == (2, 3, 3)
    half = posenc.create("mrope", head_dim=128, partial_rotary_factor=0.5)  # 32 pairs
    assert half.config.mrope_section == (8, 12, 12)
    assert default_mrope_section(3) == default_mrope_section(3, True) == (1, 1, 1)
    for n in range(3, 200):
        for flag in (False, True):
            section = default_mrope_section(n, flag)
            assert sum(section) == n and min(section) >= 1
            posenc.create("mrope", head_dim=2 * n, mrope_interleaved=flag)  # valid
    with pytest.raises(ValueError, match="too few for the default M-RoPE split"):
        posenc.create("mrope", head_dim=4)
    assert posenc.create("mrope", head_dim=4, mrope_section=[2, 0, 0]).config.mrope_section == (
        2,
        0,
        0,
    )


def test_config_round_trips_and_keeps_rope_keys():
    mrope = posenc.create(
        "mrope", head_dim=HEAD_DIM, mrope_section=[2, 3, 3], scaling={"rope_theta": 1e6}
    )
    d = mrope.config.to_dict()
    assert d["mrope_section"] == [2, 3, 3] and d["base"] == 1e6
    assert posenc.create("mrope", **d).config == mrope.config
    assert isinstance(mrope, posenc.rotary.RoPE) and isinstance(mrope, MRoPE)
    assert posenc.info("mrope").relative and not posenc.info("mrope").trainable


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"mrope_section": [2, 3, 4]}, ValueError, r"sums to 9, but there are 8 rotary pairs"),
        ({"mrope_section": [2, 6]}, ValueError, "three ints"),
        ({"mrope_section": "233"}, ValueError, "three ints"),
        ({"mrope_section": [4, -1, 5]}, ValueError, ">= 0"),
        ({"mrope_section": [2.0, 3, 3]}, TypeError, "ints"),
        ({"mrope_section": [0, 4, 4], "mrope_interleaved": True}, ValueError, "interleaved"),
        ({"mrope_interleaved": 1}, TypeError, "mrope_interleaved must be a bool"),
        (
            {
                "scaling": {
                    "rope_type": "dynamic",
                    "factor": 2.0,
                    "original_max_position_embeddings": 8,
                }
            },
            ValueError,
            "does not support 'dynamic'",
        ),
        (
            {
                "scaling": {
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 8,
                    "long_factor": [2.0] * 8,
                    "original_max_position_embeddings": 8,
                    "factor": 2.0,
                }
            },
            ValueError,
            "does not support 'longrope'",
        ),
        (
            {"mrope_sections": [2, 3, 3]},
            ValueError,
            r"unknown config key\(s\) \['mrope_sections'\]",
        ),
    ],
)
def test_config_is_strict(kwargs, error, match):
    with pytest.raises(error, match=match):
        posenc.create("mrope", head_dim=HEAD_DIM, **kwargs)


def test_positions_are_checked(tol):
    mrope = posenc.create("mrope", head_dim=HEAD_DIM)
    q = torch.randn(2, 2, 5, HEAD_DIM)
    with pytest.raises(ValueError, match=r"\[3, batch, seq\].*got shape \(4, 2, 5\)"):
        mrope(q, q, positions=torch.zeros(4, 2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="batch size 3 but the input has 2"):
        mrope(q, q, positions=torch.zeros(3, 3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="6 positions in its last dimension"):
        mrope(q, q, positions=torch.zeros(3, 2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=">= 0"):
        mrope(q, q, positions=torch.full((3, 2, 5), -1))
    with pytest.raises(ValueError, match="finite"):
        mrope(q, q, positions=torch.full((3, 2, 5), float("nan")))
    with pytest.raises(ValueError, match="1-D or 2-D or 3-D"):
        mrope(q, q, positions=torch.zeros(1, 3, 2, 5, dtype=torch.long))
    # a batch of 1 broadcasts, as Hugging Face's position_ids do
    one = torch.randint(0, 9, (3, 1, 5))
    got, expected = mrope(q, q, positions=one)[0], mrope(q, q, one.expand(3, 2, 5))[0]
    torch.testing.assert_close(got, expected, **rotation_tol(tol, q))
    assert mrope.causal_positions(one) is None
    text = torch.arange(5)
    assert mrope.causal_positions(text) is text


def test_attention_masks_three_axis_ids_by_token_order(dense_attention, attention_tol):
    mrope = posenc.create("mrope", head_dim=HEAD_DIM)
    q, k, v = (torch.randn(1, 2, 6, HEAD_DIM) for _ in range(3))
    # an image's ids do not grow with the token index: the mask must follow the index
    positions = torch.tensor([[0, 1, 1, 1, 1, 3], [0, 1, 1, 2, 2, 3], [0, 1, 2, 1, 2, 3]])
    positions = positions.unsqueeze(1)  # [3, 1, 6]
    got = posenc.attention(q, k, v, encoding=mrope, q_positions=positions, causal=True)
    q2, k2 = mrope(q, k, positions=positions)
    expected = dense_attention(q2, k2, v, causal=True)
    # the rotations inside may round otherwise (three roundings of each entry)
    rounding = attention_tol(q2, k2, v, causal=True, extra_n=6)
    torch.testing.assert_close(got.double(), expected, **rounding)


def test_functional_matches_the_module(tol):
    inv_freq, _ = rope_inv_freq(HEAD_DIM)
    positions = torch.randint(0, 100, (3, 4))  # [3, seq] is accepted by the function
    cos, sin = mrope_cos_sin(positions, inv_freq, mrope_axis((2, 3, 3)))
    module = posenc.create("mrope", head_dim=HEAD_DIM)
    expected = module.rotation(positions.unsqueeze(1))  # [3, 1, seq] -> [1, seq, n]
    # float64 cos/sin of the same angles on other shapes, rounded to float32: an ulp apart
    # at most (a vector lane and the scalar tail may differ)
    one_ulp = tol(n=1, scale=1)
    torch.testing.assert_close(cos, expected[0][0], **one_ulp)
    torch.testing.assert_close(sin, expected[1][0], **one_ulp)
    with pytest.raises(ValueError, match=r"\[3, seq\] or \[3, batch, seq\]"):
        mrope_cos_sin(positions[:2], inv_freq, mrope_axis((2, 3, 3)))


def test_compiles_with_three_axis_ids(tol):
    mrope = posenc.create("mrope", head_dim=HEAD_DIM, mrope_interleaved=True)
    q = torch.randn(1, 2, 5, HEAD_DIM)
    positions = torch.randint(0, 50, (3, 1, 5))
    compiled = torch.compile(mrope, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(
        compiled(q, q, positions=positions),
        mrope(q, q, positions=positions),
        **rotation_tol(tol, q),  # aot_eager may decompose ops
    )
