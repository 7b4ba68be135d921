"""``rope_3d`` against diffusers' rotary embeddings of Wan 2.1, HunyuanVideo and NVIDIA
Cosmos (their modules build the tables, diffusers' ``apply_rotary_emb`` turns q with
them), against a float64 reference of the formula, and its properties.

Tolerances: diffusers computes HunyuanVideo's and Cosmos's angles in float32 (position ×
frequency rounded, up to ``p·2^-24`` radians at position p < 16 here) and Wan's in
float64; posenc in float64, rounded once. So a few float32 ulps of a rotated value of
size ``2·max|x|``, plus ``16·2^-24`` radians of angle for the float32 sides."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.positions import video_grid

EPS = 2**-24


def close(got, expected, x, angle_err=0.0):
    scale = 2 * x.abs().amax().item()
    assert_close(got, expected, atol=(16 * EPS + angle_err) * scale, rtol=0)


def latents(frames, height, width, channels=4):
    return torch.randn(1, channels, frames, height, width)


def test_wan_equals_diffusers():
    wan = pytest.importorskip("diffusers.models.transformers.transformer_wan")
    rotary = wan.WanRotaryPosEmbed(attention_head_dim=24, patch_size=(1, 2, 2), max_seq_len=64)
    cos, sin = rotary(latents(3, 4, 6))  # [1, seq, 1, 24], each pair's value twice
    ours = posenc.create("rope_3d", head_dim=24)  # Wan's split (8, 8, 8), interleaved
    got_cos, got_sin = ours.rotation(video_grid(3, 2, 3))
    assert_close(got_cos, cos[0, :, 0, 0::2].float(), atol=4 * EPS, rtol=0)
    assert_close(got_sin, sin[0, :, 0, 1::2].float(), atol=4 * EPS, rtol=0)


def test_hunyuan_video_equals_diffusers():
    hv = pytest.importorskip("diffusers.models.transformers.transformer_hunyuan_video")
    from diffusers.models.embeddings import apply_rotary_emb

    rotary = hv.HunyuanVideoRotaryPosEmbed(patch_size=1, patch_size_t=1, rope_dim=[4, 6, 6])
    freqs = rotary(latents(3, 4, 5))  # ([seq, 16], [seq, 16]), theta 256
    ours = posenc.create("rope_3d", head_dim=16, axes_dim=(4, 6, 6), base=256.0)
    x = torch.randn(1, 2, 60, 16)
    got, _ = ours(x, x, positions=video_grid(3, 4, 5))
    close(got, apply_rotary_emb(x, freqs, use_real_unbind_dim=-1), x, 16 * EPS)


def test_cosmos_equals_diffusers_with_ntk_and_frame_rate():
    cosmos = pytest.importorskip("diffusers.models.transformers.transformer_cosmos")
    from diffusers.models.embeddings import apply_rotary_emb

    rotary = cosmos.CosmosRotaryPosEmbed(
        hidden_size=24, max_size=(16, 16, 16), patch_size=(1, 2, 2), rope_scale=(2.0, 1.0, 3.0)
    )
    freqs = rotary(latents(4, 6, 4), fps=12)  # ([seq, 24], [seq, 24]), halves
    ours = posenc.create("rope_3d", head_dim=24, scale=(2.0, 1.0, 3.0), layout="half")
    x = torch.randn(1, 2, 24, 24)
    got, _ = ours(x, x, positions=video_grid(4, 3, 2, fps=12, base_fps=24))
    close(got, apply_rotary_emb(x, freqs, use_real_unbind_dim=-2), x, 16 * EPS)


def test_the_formula_in_float64():
    """Pair i of axis a turns by p_a·θ_a^(-2i/d_a), θ_a = base·s_a^(d_a/(d_a - 2))."""
    enc = posenc.create("rope_3d", head_dim=20, axes_dim=(8, 4, 8), scale=(1.0, 1.0, 4.0))
    positions = video_grid(2, 3, 4)
    cos, sin = enc.rotation(positions)
    pos = positions.double()
    parts = []
    for a, (dim, s) in enumerate(zip((8, 4, 8), (1.0, 1.0, 4.0), strict=True)):
        theta = 10000.0 * s ** (dim / (dim - 2))
        freq = theta ** -(torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        parts.append(pos[:, a : a + 1] * freq)
    angles = torch.cat(parts, dim=-1)
    assert_close(cos, angles.cos().float(), atol=2 * EPS, rtol=0)
    assert_close(sin, angles.sin().float(), atol=2 * EPS, rtol=0)


def test_scores_depend_on_the_offset_only():
    enc = posenc.create("rope_3d", head_dim=24)
    q, k = torch.randn(1, 1, 1, 24).double(), torch.randn(1, 1, 1, 24).double()
    a = torch.tensor([[1, 2, 3]]), torch.tensor([[0, 1, 1]])
    b = torch.tensor([[5, 7, 4]]), torch.tensor([[4, 6, 2]])  # the same offset (1, 1, 2)
    scores = []
    for p, r in (a, b):
        q2, k2 = enc(q, k, positions=p, k_positions=r)
        scores.append((q2 * k2).sum())
    assert_close(scores[0], scores[1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"axes_dim": (8, 8, 6)}, "sums to 22, but head_dim is 24"),
        ({"axes_dim": (7, 9, 8)}, "axes_dim t"),
        ({"scale": (1.0, 1.0)}, "scale must be three numbers"),
        ({"layout": "zigzag"}, "layout"),
        ({"grid": (2, 3)}, "grid must be"),
    ],
)
def test_bad_config_is_named(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        posenc.create("rope_3d", head_dim=24, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"axes_dim": {4, 8, 12}}, "axes_dim must be three ints .* tuple or list"),  # no order
        ({"axes_dim": 12}, "axes_dim must be three ints"),
        ({"axes_dim": "tthhww"}, "axes_dim must be three ints"),
        ({"scale": 2.0}, "scale must be three numbers"),
        ({"scale": None}, "scale must be three numbers"),
        ({"scale": {1.0, 2.0, 3.0}}, "scale must be three numbers"),
        ({"grid": {2, 3, 4}}, "grid must be"),
    ],
)
def test_what_is_not_an_ordered_triple_is_a_type_error(kwargs, message):
    with pytest.raises(TypeError, match=message):
        posenc.create("rope_3d", head_dim=24, **kwargs)


@pytest.mark.parametrize(
    ("scale", "message"),
    [
        ((1e-10, 1.0, 1.0), "scale t=1e-10 gives axis t an effective base"),  # 1e4·1e-20
        ((1.0, 1e-3, 1.0), "scale h=0.001 gives axis h"),  # 1e4·1e-6 (h: 4 channels)
        ((1.0, 1.0, 1e15), r"scale w=1e\+15 gives axis w"),  # past MAX_FLOAT
    ],
)
def test_a_scale_whose_effective_base_base_refuses_is_refused(scale, message):
    """``θ_a = base·s_a^(d_a/(d_a − 2))`` must be a base ``base=`` itself would take."""
    with pytest.raises(ValueError, match=message):
        posenc.create("rope_3d", head_dim=20, axes_dim=(8, 4, 8), scale=scale)
    with pytest.raises(ValueError, match="base must be > 1"):
        posenc.create("rope_3d", head_dim=20, base=0.5)


def test_a_scale_below_one_with_a_base_above_one_is_the_formula():
    enc = posenc.create("rope_3d", head_dim=20, axes_dim=(8, 4, 8), scale=[0.5, 1, 1])
    theta = 10000.0 * 0.5 ** (8 / 6)
    freq = theta ** -(torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    assert enc.config.scale == (0.5, 1.0, 1.0)
    assert_close(enc.inv_freq()[:4], freq)
    cos, _ = enc.rotation(video_grid(3, 1, 1))
    assert_close(cos[:, :4], (torch.arange(3.0, dtype=torch.float64)[:, None] * freq).cos().float())


@pytest.mark.parametrize(("seq_len", "error"), [("a", TypeError), (-1, ValueError)])
def test_rotation_checks_its_seq_len(seq_len, error):
    enc = posenc.create("rope_3d", head_dim=12)
    with pytest.raises(error, match="seq_len"):
        enc.rotation(video_grid(1, 2, 2), seq_len)


def test_inv_freq_names_a_bad_device():
    with pytest.raises(TypeError, match="device"):
        posenc.create("rope_3d", head_dim=12).inv_freq(device=0.5)


def test_no_default_positions_without_the_whole_grid():
    enc = posenc.create("rope_3d", head_dim=12, grid=(2, 2, 2))
    x = torch.randn(1, 1, 5, 12)
    with pytest.raises(ValueError, match="video_grid"):
        enc(x, x)


@pytest.mark.parametrize(
    ("seq_len", "offset", "error", "match"),
    [
        ("8", 0, TypeError, "seq_len must be an int"),
        (8.0, 0, TypeError, "seq_len must be an int"),
        (-1, 0, ValueError, "seq_len must be >= 0"),
        (8, None, TypeError, "offset must be an int"),  # None was taken as no offset
        (8, True, TypeError, "offset must be an int"),
        (8, -1, ValueError, "offset must be >= 0"),
    ],
)
def test_default_positions_name_a_bad_length_or_offset(seq_len, offset, error, match):
    """They were compared with the grid's size and refused as 'no default positions'."""
    enc = posenc.create("rope_3d", head_dim=12, grid=(2, 2, 2))
    with pytest.raises(error, match=match):
        enc.default_positions(seq_len, offset=offset)
    assert torch.equal(enc.default_positions(8, offset=0), video_grid(2, 2, 2))


def _rotate_cases():
    """(x, rotation, key, error, match) of a head-12 rope_3d (6 pairs), 4 tokens, batch 2."""
    enc, other = posenc.create("rope_3d", head_dim=12), posenc.create("rope_3d", head_dim=24)
    x = torch.randn(2, 3, 4, 12)
    grid = video_grid(1, 2, 2)
    rot = enc.rotation(grid)
    cos, sin = rot
    tables = r"rotation must be RoPE3D's tables for x's positions \(\[seq, 6\]"
    return [
        (torch.randn(2, 3, 4, 24), rot, False, ValueError, "x must be .* head_dim=12"),
        (x.long(), rot, False, TypeError, "x must be a floating"),
        (x.tolist(), rot, False, TypeError, "x must be a floating"),
        (x, other.rotation(grid), False, ValueError, tables),  # a head of 24
        # a head of 6: its 3 pairs turned x's first 6 channels, the rest passed through
        (x, posenc.create("rope_3d", head_dim=6).rotation(grid), False, ValueError, tables),
        (x, enc.rotation(video_grid(1, 1, 2)), False, ValueError, tables),
        (x, (cos.expand(3, 4, 6), sin.expand(3, 4, 6)), False, ValueError, "batch=2"),
        (x, None, False, TypeError, "rotation must be the tuple .* got NoneType"),
        (x, rot[:1], False, ValueError, "rotation must be the 2 tables .*, got 1"),
        (x, (cos.long(), sin), False, TypeError, "rotation's tables must be a floating"),
        (x, (cos.to("meta"), sin.to("meta")), False, ValueError, "rotation is on meta"),
        (x, rot, "no", TypeError, "key must be a bool"),
        (x, rot, 1, TypeError, "key must be a bool"),
    ]


@pytest.mark.parametrize("case", range(len(_rotate_cases())))
def test_rotate_refuses_by_name_what_is_not_its_rotation_of_x(case):
    """A rotation of a narrower head turned x's first channels only, a key that is no
    bool was ignored, None failed unpacking."""
    x, rotation, key, error, match = _rotate_cases()[case]
    with pytest.raises(error, match=match):
        posenc.create("rope_3d", head_dim=12).rotate(x, rotation, key=key)
