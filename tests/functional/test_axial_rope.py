"""Axial 2-D RoPE and RoPE-Mixed (Heo et al. 2024, arXiv:2403.13298): frequencies and angles
against loops over pairs, rows and columns."""

import math

import pytest
import torch

from posenc.functional import (
    AXIS_ORDERS,
    axial_rope_cos_sin,
    axial_rope_inv_freq,
    rope_mixed_cos_sin,
    rope_mixed_freqs,
)


@pytest.mark.parametrize("head_dim, base, coord_scale", [(16, 100.0, 1.0), (64, 10.0, 2 * math.pi)])
def test_inv_freq_is_coord_scale_times_base_to_minus_4i_over_d(head_dim, base, coord_scale, tol):
    expected = [coord_scale * base ** (-4 * i / head_dim) for i in range(head_dim // 4)]
    got = axial_rope_inv_freq(head_dim, base, coord_scale)
    assert got.dtype == torch.float64
    torch.testing.assert_close(
        got, torch.tensor(expected, dtype=torch.float64), **tol(torch.float64, n=4, scale=0)
    )


@pytest.mark.parametrize("bad, exc", [(6, ValueError), (0, ValueError), (16.0, TypeError)])
def test_head_dim_must_be_a_multiple_of_4(bad, exc):
    with pytest.raises(exc, match="head_dim"):
        axial_rope_inv_freq(bad)


@pytest.mark.parametrize("axis_order", AXIS_ORDERS)
def test_axial_angles_are_each_axis_times_its_frequencies(axis_order, tol):
    inv_freq = axial_rope_inv_freq(16, 100.0)  # [4]
    positions = torch.tensor([[0, 0], [0, 3], [2, 1], [7, 5]])  # (row, column)
    n = inv_freq.numel()
    cos = torch.empty(4, 2 * n, dtype=torch.float64)
    sin = torch.empty(4, 2 * n, dtype=torch.float64)
    for s, (row, col) in enumerate(positions.tolist()):
        first, second = (col, row) if axis_order == "xy" else (row, col)
        for i, f in enumerate(inv_freq.tolist()):
            for offset, coord in ((0, first), (n, second)):
                cos[s, offset + i] = math.cos(coord * f)
                sin[s, offset + i] = math.sin(coord * f)
    got_cos, got_sin = axial_rope_cos_sin(positions, inv_freq, axis_order)
    assert got_cos.dtype == torch.float32
    # float64 angles rounded once to float32
    torch.testing.assert_close(got_cos.double(), cos, **tol(n=1, scale=1))
    torch.testing.assert_close(got_sin.double(), sin, **tol(n=1, scale=1))
    batched = axial_rope_cos_sin(positions.expand(2, 4, 2), inv_freq, axis_order)
    assert torch.equal(batched[0][1], got_cos)


def test_axial_positions_must_be_pairs():
    with pytest.raises(ValueError, match=r"\[seq, 2\]"):
        axial_rope_cos_sin(torch.zeros(4, 3), axial_rope_inv_freq(8))
    with pytest.raises(ValueError, match="axis_order"):
        axial_rope_cos_sin(torch.zeros(4, 2), axial_rope_inv_freq(8), "zx")


def test_mixed_freqs_point_along_each_heads_direction():
    head_dim, base = 16, 10.0
    phases = torch.tensor([0.0, 0.3, 2.0], dtype=torch.float64)
    got = rope_mixed_freqs(phases, head_dim, base)
    assert got.shape == (2, 3, head_dim // 2)
    quarter = head_dim // 4
    for h, phi in enumerate(phases.tolist()):
        for i in range(quarter):
            m = base ** (-4 * i / head_dim)
            expected = {
                (0, i): m * math.cos(phi),
                (0, quarter + i): m * math.cos(phi + math.pi / 2),
                (1, i): m * math.sin(phi),
                (1, quarter + i): m * math.sin(phi + math.pi / 2),
            }
            for (axis, pair), value in expected.items():
                assert got[axis, h, pair].item() == pytest.approx(value, rel=1e-14, abs=1e-15)


def test_mixed_angles_are_x_fx_plus_y_fy(tol):
    freqs = torch.randn(2, 3, 4, dtype=torch.float64)
    positions = torch.tensor([[0, 0], [1, 2], [5, 3]])  # (row y, column x)
    cos = torch.empty(1, 3, 3, 4, dtype=torch.float64)
    sin = torch.empty(1, 3, 3, 4, dtype=torch.float64)
    for h in range(3):
        for s, (y, x) in enumerate(positions.tolist()):
            for i in range(4):
                angle = x * freqs[0, h, i].item() + y * freqs[1, h, i].item()
                cos[0, h, s, i], sin[0, h, s, i] = math.cos(angle), math.sin(angle)
    got_cos, got_sin = rope_mixed_cos_sin(positions, freqs)
    assert got_cos.dtype == torch.float64  # float64 frequencies keep float64
    angle = (positions.abs().sum(-1).max() * freqs.abs().max()).item()
    torch.testing.assert_close(got_cos, cos, **tol(torch.float64, n=4, scale=angle))
    torch.testing.assert_close(got_sin, sin, **tol(torch.float64, n=4, scale=angle))
    cos32, _ = rope_mixed_cos_sin(positions, freqs.float())
    torch.testing.assert_close(cos32.double(), cos, **tol(n=4, scale=angle))


def test_mixed_freqs_at_phase_zero_are_axial():
    f = rope_mixed_freqs(torch.zeros(1, dtype=torch.float64), 16, 10.0)
    inv_freq = axial_rope_inv_freq(16, 10.0)
    torch.testing.assert_close(f[0, 0, :4], inv_freq)
    torch.testing.assert_close(f[1, 0, 4:], inv_freq)
