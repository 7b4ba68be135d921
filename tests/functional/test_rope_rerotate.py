"""Re-rotating keys equals rotating the raw keys at the new positions with the new
frequencies: rotations compose (``R(b)·R(a)⁻¹ = R(b - a)``), in both layouts, with partial
rotary, scalings with an attention factor, and LongRoPE's short-to-long switch.

Tolerance: both sides round cos and sin once to float32 and turn a pair in float32; the
re-rotated key is turned twice, so a few float32 ulps of the largest rotated value."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.functional.rope_rerotate import rerotate_keys, rerotation

SCALINGS = [
    None,
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 32},
]  # fmt: skip


def close(got, expected):
    scale = 4 * expected.abs().amax().item()
    assert_close(got, expected, atol=16 * 2**-24 * scale, rtol=0)


def rotated(rope, k, positions, seq_len=None):
    cos, sin = rope.rotation(positions, seq_len)
    return rope.rotate(k, (cos, sin), key=True)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", SCALINGS, ids=["plain", "yarn", "llama3"])
def test_a_shift_equals_rotating_at_the_new_positions(layout, scaling):
    rope = posenc.create("rope", head_dim=24, rotary_dim=16, layout=layout, scaling=scaling)
    k = torch.randn(2, 3, 9, 24)
    positions = torch.stack([torch.arange(9) + 4, torch.arange(9) * 2 + 3])  # per row
    before = (rope.inv_freq(), rope.attention_factor())
    for delta in (7, -3, torch.tensor([[5], [1000]])):
        got = rerotate_keys(rotated(rope, k, positions), positions, before, None, delta, layout)
        close(got, rotated(rope, k, positions + delta))
        assert torch.equal(got[..., 16:], k[..., 16:])  # past rotary_dim: untouched


def test_a_switch_of_frequencies_equals_the_new_rotation():
    """LongRoPE crossing its original length: keys rotated with the short factors (and
    factor 1 below the original length), re-rotated to the long ones and their attention
    factor, equal the keys rotated with the long ones."""
    scaling = {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "short_factor": [1.0, 1.1, 1.3, 1.6],
        "long_factor": [1.0, 2.0, 3.0, 5.0],
    }
    rope = posenc.create("rope", head_dim=8, scaling=scaling)
    assert not torch.equal(rope.inv_freq(8), rope.inv_freq(40))
    k, positions = torch.randn(1, 2, 12, 8), torch.arange(12)
    short = (rope.inv_freq(12), rope.attention_factor(12))
    long = (rope.inv_freq(40), rope.attention_factor(40))
    got = rerotate_keys(rotated(rope, k, positions, 12), positions, short, long)
    close(got, rotated(rope, k, positions, 40))
    stale = rotated(rope, k, positions, 12)  # what keeping the old keys would attend with
    assert (stale - rotated(rope, k, positions, 40)).abs().max() > 0.1


def test_bad_input_is_named():
    freq = torch.ones(4)
    with pytest.raises(ValueError, match="must rotate the same pairs"):
        rerotation(torch.arange(3), (freq, 1.0), (torch.ones(3), 1.0))
    with pytest.raises(TypeError, match="positions must be integers"):
        rerotation(torch.arange(3.0), (freq, 1.0), (freq, 1.0))
    with pytest.raises(ValueError, match="attention factors"):
        rerotation(torch.arange(3), (freq, 0.0), (freq, 1.0))
