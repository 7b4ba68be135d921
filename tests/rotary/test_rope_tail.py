"""RoPE on a head's last channels (``rotary_at="end"``) and the conjugate rotation
(``rotate_back``): DeepSeek-V4's ``[nope | rope]`` heads, rotated with interleaved pairs,
and its attention output turned back at the query's position. Against transformers'
``deepseek_v4`` functions, a float64 round trip, the Triton kernel, and cache re-rotation.

Tolerances: both sides round cos and sin once to float32 and turn a pair in float32
(transformers' angles are a float32 product: ``p·2^-24`` radians at position p < 64
here), so a few float32 ulps of ``2·max|x|`` plus that angle error."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.functional.rope import rope_cos_sin

EPS = 2**-24


def v4_rope(**kwargs):
    """DeepSeek-V4's rotation, scaled down: a head of 48 whose last 16 channels rotate."""
    return posenc.create(
        "rope", head_dim=48, rotary_dim=16, layout="interleaved", rotary_at="end", **kwargs
    )


def close(got, expected, x, positions=64):
    scale = 2 * x.abs().amax().item()
    assert_close(got, expected, atol=(16 * EPS + positions * EPS) * scale, rtol=0)


def test_equals_transformers_deepseek_v4_rotation_and_its_conjugate():
    v4 = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")
    rope = v4_rope()
    x = torch.randn(2, 3, 40, 48)
    positions = torch.arange(40) + 20
    rotation = rope.rotation(positions)
    # V4's tables: one cos and sin per pair, [batch, seq, pairs]; its x is [b, s, h, d]
    cos, sin = rope_cos_sin(positions, rope.inv_freq())
    cos, sin = cos.expand(2, 40, 8), sin.expand(2, 40, 8)
    theirs = v4.apply_rotary_pos_emb(x.transpose(1, 2), cos, sin, unsqueeze_dim=2)
    close(rope.rotate(x, rotation), theirs.transpose(1, 2), x)
    back = v4.apply_rotary_pos_emb(x.transpose(1, 2), cos, -sin, unsqueeze_dim=2)
    close(rope.rotate_back(x, rotation), back.transpose(1, 2), x)
    assert torch.equal(rope.rotate(x, rotation)[..., :32], x[..., :32])  # nope: untouched


def test_rotate_back_undoes_rotate():
    rope = v4_rope()
    x = torch.randn(1, 2, 9, 48, dtype=torch.float64)
    rotation = rope.rotation(torch.arange(9, dtype=torch.float64) * 1000)
    assert_close(rope.rotate_back(rope.rotate(x, rotation), rotation), x)


def test_scores_depend_on_the_offset_only():
    rope = v4_rope()
    q, k = torch.randn(2, 1, 1, 1, 48, dtype=torch.float64).unbind()
    scores = []
    for m, n in ((3, 10), (50, 57)):
        q2, k2 = rope(q, k, positions=torch.tensor([m]), k_positions=torch.tensor([n]))
        scores.append((q2 * k2).sum())
    assert_close(scores[0], scores[1])


@pytest.mark.triton
def test_the_triton_kernel_turns_the_tail_too():
    pytest.importorskip("triton")
    fast, plain = v4_rope(kernel="triton"), v4_rope()
    q, k = torch.randn(2, 4, 11, 48), torch.randn(2, 2, 11, 48)
    for a, b, x in zip(fast(q, k), plain(q, k), (q, k), strict=True):
        close(a, b, x, positions=0)
    rotation = plain.rotation(torch.arange(11))
    close(fast.rotate_back(q, rotation), plain.rotate_back(q, rotation), q, positions=0)


def test_a_cache_of_tail_keys_rerotates():
    rope = v4_rope()
    k = torch.randn(1, 1, 5, 48)
    cache = posenc.KVCache(1, 1, 1, 48, max_seq_len=5)
    rotated = rope.rotate(k, rope.rotation(torch.arange(5)), key=True)
    cache.update_positions(torch.arange(5).view(1, 5))
    cache.update(0, rotated, k)
    cache.advance(5)
    cache.rerotate(rope, delta=30)
    expected = rope.rotate(k, rope.rotation(torch.arange(5) + 30), key=True)
    close(cache.stored_keys(0)[0], expected, k)


def test_what_cannot_turn_the_tail_says_so():
    with pytest.raises(ValueError, match="rotary_at must be one of"):
        posenc.create("rope", head_dim=8, rotary_at="middle")
    with pytest.raises(ValueError, match="xpos rotates and scales a head's first"):
        posenc.create("xpos", head_dim=8, rotary_at="end")
    xpos = posenc.create("xpos", head_dim=8)
    with pytest.raises(TypeError, match="no conjugate rotation"):
        xpos.rotate_back(torch.randn(1, 1, 2, 8), xpos.rotation(torch.arange(2)))


def _rotate_back_cases():
    """(x, rotation, error, match) of a head-48 RoPE whose last 16 channels turn (8 pairs),
    10 positions, a batch of 2."""
    rope, other = v4_rope(), posenc.create("rope", head_dim=48)
    x = torch.randn(2, 3, 10, 48)
    rot = rope.rotation(torch.arange(10))
    cos, sin = rot
    return [
        (torch.randn(2, 3, 10, 64), rot, ValueError, "x must be .* head_dim=48"),
        (torch.randn(2, 3, 10, 3), rot, ValueError, "x must be .* head_dim=48"),
        (torch.ones(2, 3, 10, 48, dtype=torch.long), rot, TypeError, "x must be a floating"),
        (x[0], rot, ValueError, "x must be"),
        (x.tolist(), rot, TypeError, "x must be a floating"),
        (x, other.rotation(torch.arange(10)), ValueError, "rotation must be this RoPE's"),
        (x, rope.rotation(torch.arange(7)), ValueError, "rotation must be this RoPE's"),
        (x, (cos.expand(3, 10, 8), sin.expand(3, 10, 8)), ValueError, "batch=2"),
        (x, (cos, sin[:5]), ValueError, "rotation must be this RoPE's"),
        (x, rot[:1], TypeError, "rotation must be .* pair, got a tuple of 1"),
        (x, None, TypeError, "rotation must be .* pair, got NoneType"),
        (x, (cos, sin, sin), TypeError, "got a tuple of 3"),
        (x, (cos.long(), sin), TypeError, "rotation's cos must be a floating"),
        (x, (cos.tolist(), sin), TypeError, "rotation's cos must be a floating"),
        (x, (cos.to("meta"), sin.to("meta")), ValueError, "rotation is on meta"),
    ]


@pytest.mark.parametrize("case", range(len(_rotate_back_cases())))
def test_rotate_back_refuses_by_name_what_is_not_its_rotation_of_x(case):
    """Each was accepted (a wrong head or an integer x came back turned in part, or
    truncated) or failed inside torch or Python."""
    x, rotation, error, match = _rotate_back_cases()[case]
    with pytest.raises(error, match=match):
        v4_rope().rotate_back(x, rotation)


def test_rotate_back_takes_batched_tables_and_a_list():
    rope = v4_rope()
    x = torch.randn(2, 3, 10, 48, dtype=torch.float64)
    positions = torch.stack([torch.arange(10), torch.arange(10) + 5])
    cos, sin = rope.rotation(positions)  # [2, 10, 8]
    got = rope.rotate_back(x, [cos, sin])
    for row in range(2):
        expected = rope.rotate_back(x[row : row + 1], rope.rotation(positions[row]))
        assert_close(got[row : row + 1], expected)
