"""M-RoPE (Qwen2-VL, arXiv:2409.12191; Qwen3-VL interleaved): the split of the pairs, the axis
of each pair and the angles, against loops written from the papers' description."""

import math

import pytest
import torch

from posenc.functional import (
    check_mrope_section,
    default_mrope_section,
    mrope_axis,
    mrope_cos_sin,
    rope_inv_freq,
)


def reference_axis(section, interleaved):
    """Sectioned: s_t pairs of t, then s_h of h, then s_w of w. Interleaved: pairs cycle
    t, h, w while h and w last, the rest are t."""
    if not interleaved:
        return [a for a, s in enumerate(section) for _ in range(s)]
    counts, axes = [0, 0, 0], []
    for pair in range(sum(section)):
        axis = pair % 3
        if axis and counts[axis] >= section[axis]:
            axis = 0
        counts[axis] += 1
        axes.append(axis)
    return axes


@pytest.mark.parametrize(
    "section, interleaved",
    [
        ((16, 24, 24), False),
        ((2, 3, 3), False),
        ((4, 0, 4), False),
        ((24, 20, 20), True),
        ((4, 2, 2), True),
        ((2, 1, 1), True),
    ],
)
def test_axis_of_each_pair(section, interleaved):
    check_mrope_section(section, sum(section), interleaved)
    assert mrope_axis(section, interleaved).tolist() == reference_axis(section, interleaved)


@pytest.mark.parametrize("n_pairs", [3, 4, 8, 16, 64, 100])
@pytest.mark.parametrize("interleaved", [False, True])
def test_default_section_scales_the_published_split(n_pairs, interleaved):
    spatial = max(1, math.floor((5 if interleaved else 3) * n_pairs / (16 if interleaved else 8)))
    section = default_mrope_section(n_pairs, interleaved)
    assert section == (n_pairs - 2 * spatial, spatial, spatial)
    check_mrope_section(section, n_pairs, interleaved)


def test_too_few_pairs_for_the_default_split():
    with pytest.raises(ValueError, match="too few"):
        default_mrope_section(2)


@pytest.mark.parametrize(
    "section, n_pairs, interleaved, exc, match",
    [
        ((2, 3), 5, False, ValueError, "three ints"),
        ("abc", 3, False, ValueError, "three ints"),
        ((2, 3.0, 3), 8, False, TypeError, "ints"),
        ((2, -1, 7), 8, False, ValueError, ">= 0"),
        ((2, 3, 3), 9, False, ValueError, "sums to 8"),
        ((0, 4, 4), 8, True, ValueError, "interleaved"),
    ],
)
def test_bad_sections_are_named(section, n_pairs, interleaved, exc, match):
    with pytest.raises(exc, match=match):
        check_mrope_section(section, n_pairs, interleaved)


@pytest.mark.parametrize("interleaved", [False, True])
def test_angles_take_each_pairs_own_axis(interleaved, tol):
    section = (2, 1, 1) if interleaved else (2, 3, 3)
    n = sum(section)
    inv_freq, _ = rope_inv_freq(2 * n, 100.0)
    positions = torch.tensor([[[0, 5, 9]], [[0, 1, 2]], [[0, 3, 7]]])  # [3, batch 1, seq 3]
    axes = reference_axis(section, interleaved)
    cos = torch.empty(1, 3, n, dtype=torch.float64)
    sin = torch.empty(1, 3, n, dtype=torch.float64)
    for s in range(3):
        for i in range(n):
            angle = positions[axes[i], 0, s].item() * inv_freq[i].item()
            cos[0, s, i], sin[0, s, i] = 1.5 * math.cos(angle), 1.5 * math.sin(angle)
    got_cos, got_sin = mrope_cos_sin(positions, inv_freq, mrope_axis(section, interleaved), 1.5)
    assert got_cos.shape == (1, 3, n) and got_cos.dtype == torch.float32
    # float64 angle and factor, rounded once to float32
    torch.testing.assert_close(got_cos.double(), cos, **tol(n=2, scale=1.5))
    torch.testing.assert_close(got_sin.double(), sin, **tol(n=2, scale=1.5))


def test_positions_must_have_three_axes():
    with pytest.raises(ValueError, match=r"\[3, seq\]"):
        mrope_cos_sin(torch.zeros(2, 4).long(), rope_inv_freq(8)[0], mrope_axis((2, 1, 1)))


def test_axis_must_match_the_pairs():
    with pytest.raises(ValueError, match="axis must give one axis per pair of inv_freq"):
        mrope_cos_sin(torch.zeros(3, 4).long(), rope_inv_freq(8)[0], mrope_axis((2, 2, 2)))
    with pytest.raises(TypeError, match="axis must be an integer tensor"):
        mrope_cos_sin(torch.zeros(3, 4).long(), rope_inv_freq(8)[0], torch.zeros(4))


def test_axis_checks_the_section_it_shares_out():
    """An interleaved split whose h and w pairs do not exist is refused, not shared out
    short (``(1, 5, 5)`` would give h four pairs)."""
    with pytest.raises(ValueError, match="interleaved mrope_section"):
        mrope_axis((1, 5, 5), interleaved=True)
    with pytest.raises(TypeError, match="interleaved must be a bool"):
        mrope_axis((2, 1, 1), interleaved="yes")
    with pytest.raises(ValueError, match="mrope_section must be three ints"):
        mrope_axis({2, 1})
