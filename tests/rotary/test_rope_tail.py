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


def _rotation_cases():
    """(x, rotation, error, match) of a head-48 RoPE whose last 16 channels turn (8 pairs),
    10 positions, a batch of 2."""
    rope, other = v4_rope(), posenc.create("rope", head_dim=48)
    x = torch.randn(2, 3, 10, 48)
    rot = rope.rotation(torch.arange(10))
    cos, sin = rot
    tables = r"rotation must be RoPE's tables for x's positions \(\[seq, 8\]"
    return [
        (torch.randn(2, 3, 10, 64), rot, ValueError, "x must be .* head_dim=48"),
        (torch.randn(2, 3, 10, 3), rot, ValueError, "x must be .* head_dim=48"),
        (torch.ones(2, 3, 10, 48, dtype=torch.long), rot, TypeError, "x must be a floating"),
        (x[0], rot, ValueError, "x must be"),
        (x.tolist(), rot, TypeError, "x must be a floating"),
        (x, other.rotation(torch.arange(10)), ValueError, tables),
        (x, rope.rotation(torch.arange(7)), ValueError, tables),
        (x, (cos.expand(3, 10, 8), sin.expand(3, 10, 8)), ValueError, "batch=2"),
        (x, (cos, sin[:5]), ValueError, tables),
        (x, rot[:1], ValueError, "rotation must be the 2 tables .*, got 1"),
        (x, None, TypeError, "rotation must be the tuple .* got NoneType"),
        (x, (cos, sin, sin), ValueError, "rotation must be the 2 tables .*, got 3"),
        (x, (cos.long(), sin), TypeError, "rotation's tables must be a floating"),
        (x, (cos.tolist(), sin), TypeError, "rotation's tables must be a floating"),
        (x, (cos.to("meta"), sin.to("meta")), ValueError, "rotation is on meta"),
    ]


@pytest.mark.parametrize("method", ["rotate", "rotate_back"])
@pytest.mark.parametrize("case", range(len(_rotation_cases())))
def test_rotate_and_rotate_back_refuse_by_name_what_is_not_their_rotation_of_x(method, case):
    """Each was accepted (a wrong head or an integer x came back turned in part, or
    truncated) or failed inside torch or Python; one check serves both."""
    x, rotation, error, match = _rotation_cases()[case]
    with pytest.raises(error, match=match):
        getattr(v4_rope(), method)(x, rotation)


@pytest.mark.parametrize("key", [None, "no", 1, torch.tensor(True)])
def test_rotate_takes_a_bool_key(key):
    """RoPE turns queries and keys alike, but a key that is no bool was ignored."""
    rope = v4_rope()
    with pytest.raises(TypeError, match="key must be a bool"):
        rope.rotate(torch.randn(1, 2, 3, 48), rope.rotation(torch.arange(3)), key=key)


KERNELS = ["auto", pytest.param("triton", marks=pytest.mark.triton)]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", range(len(_rotation_cases())))
def test_rotate_pair_refuses_by_name_what_is_not_its_rotation(kernel, case):
    """The Triton kernel's one launch for q and k is checked as rotate is."""
    if kernel == "triton":
        pytest.importorskip("triton")  # on the CPU under TRITON_INTERPRET (tests/conftest.py)
    x, rotation, error, match = _rotation_cases()[case]
    rope = v4_rope(kernel=kernel)
    k = torch.randn(2, 1, 10, 48)
    with pytest.raises(error, match=match.replace("x must", "q must")):
        rope.rotate_pair(x, k, rotation)


@pytest.mark.parametrize("kernel", KERNELS)
def test_rotate_pair_names_k(kernel):
    if kernel == "triton":
        pytest.importorskip("triton")
    rope = v4_rope(kernel=kernel)
    q, rotation = torch.randn(1, 2, 3, 48), rope.rotation(torch.arange(3))
    with pytest.raises(ValueError, match=r"k must be .* head_dim=48, got shape"):
        rope.rotate_pair(q, torch.randn(1, 1, 3, 16), rotation)
    with pytest.raises(TypeError, match="k must be a floating"):
        rope.rotate_pair(q, q.long(), rotation)
    rows = rope.rotation(torch.stack([torch.arange(3), torch.arange(3) + 4]))  # [2, 3, n]
    with pytest.raises(ValueError, match="batch=1"):  # k's own batch against the tables
        rope.rotate_pair(q.expand(2, -1, -1, -1), torch.randn(1, 1, 3, 48), rows)


def test_rotate_back_takes_batched_tables_and_a_list():
    rope = v4_rope()
    x = torch.randn(2, 3, 10, 48, dtype=torch.float64)
    positions = torch.stack([torch.arange(10), torch.arange(10) + 5])
    cos, sin = rope.rotation(positions)  # [2, 10, 8]
    got = rope.rotate_back(x, [cos, sin])
    for row in range(2):
        expected = rope.rotate_back(x[row : row + 1], rope.rotation(positions[row]))
        assert_close(got[row : row + 1], expected)
