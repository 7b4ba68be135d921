"""xPos math (Sun et al. 2022, arXiv:2212.10554): ζ, the scale, the window and the apply step,
against the paper's formulas written as loops."""

import math

import pytest
import torch

from posenc.functional import (
    apply_rope,
    apply_xpos,
    rope_cos_sin,
    rope_inv_freq,
    xpos_max_distance,
    xpos_scale,
    xpos_zeta,
)
from posenc.functional import xpos as xpos_math


@pytest.mark.parametrize("rotary_dim", [2, 8, 64, 128])
def test_zeta_is_the_papers_formula(rotary_dim, tol):
    gamma = 0.4
    expected = [(2 * i / rotary_dim + gamma) / (1 + gamma) for i in range(rotary_dim // 2)]
    got = xpos_zeta(rotary_dim)
    assert got.dtype == torch.float64
    torch.testing.assert_close(
        got, torch.tensor(expected, dtype=torch.float64), **tol(torch.float64, n=4)
    )
    assert got[0].item() == pytest.approx(2 / 7)


@pytest.mark.parametrize("center", [0.0, 100.0])
def test_scale_is_zeta_to_the_relative_position(center, tol):
    zeta = xpos_zeta(8)
    positions = torch.tensor([0, 1, 17, 511, 4000])
    expected = torch.tensor(
        [[z ** ((n - center) / 512) for z in zeta.tolist()] for n in positions.tolist()],
        dtype=torch.float64,
    )
    got = xpos_scale(positions, zeta, 512.0, center)
    assert got.dtype == torch.float32
    # float64 pow rounded once to float32
    torch.testing.assert_close(got.double(), expected, **tol(n=1, scale=0))
    assert xpos_scale(positions.double(), zeta, 512.0, center).dtype == torch.float64


def test_query_key_product_depends_on_the_distance_only(tol):
    """Pair i of q·k gains ζ_i^((n - m)/scale_base), whatever the centre."""
    zeta = xpos_zeta(8)
    n, m = torch.tensor([300.0]).double(), torch.tensor([100.0]).double()
    for center in (0.0, 250.0, 5000.0):
        product = xpos_scale(n, zeta, 512.0, center) / xpos_scale(m, zeta, 512.0, center)
        expected = zeta ** (200 / 512)
        torch.testing.assert_close(product[0], expected, **tol(torch.float64, n=8, scale=0))


@pytest.mark.parametrize(
    "dtype, expected", [(torch.float32, 33711), (torch.bfloat16, 33711), (torch.float16, 1983)]
)
def test_max_distance(dtype, expected):
    assert math.floor(xpos_max_distance(512.0, dtype)) == expected
    assert xpos_max_distance(1024.0, dtype) == pytest.approx(2 * xpos_max_distance(512.0, dtype))


@pytest.mark.parametrize("key", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_is_rope_times_the_factor(key, layout, tol):
    x = torch.randn(1, 2, 5, 8)
    positions = torch.arange(5) + 40
    cos, sin = rope_cos_sin(positions, rope_inv_freq(8)[0])
    scale = xpos_scale(positions, xpos_zeta(8))
    got = apply_xpos(x, cos, sin, scale, layout, key=key)
    rotated = apply_rope(x.double(), cos.double(), sin.double(), layout)
    factor = (1 / scale.double() if key else scale.double()).repeat_interleave(2, -1)
    if layout == "half":
        factor = torch.cat((factor[..., 0::2], factor[..., 1::2]), dim=-1)
    expected = rotated * factor
    torch.testing.assert_close(got.double(), expected, **tol(n=4, scale=2 * x.abs().max()))


def test_factor_bound_is_the_max_distance_in_powers_of_two():
    """xpos_factor_bound(dtype) * scale_base / log2(7/2) is xpos_max_distance."""
    assert xpos_math.xpos_factor_bound(torch.float32) == 119
    assert xpos_math.xpos_factor_bound(torch.bfloat16) == 119
    assert xpos_math.xpos_factor_bound(torch.float16) == 7
    for dtype in (torch.float32, torch.float16):
        bound = xpos_math.xpos_factor_bound(dtype) * 512.0 / math.log2(3.5)
        assert xpos_max_distance(512.0, dtype) == pytest.approx(bound)
    with pytest.raises(TypeError, match=r"dtype must be a floating torch\.dtype"):
        xpos_math.xpos_factor_bound(torch.int64)


def test_the_math_reads_no_value():
    """Pure math: no host read, whatever the factors (a float16 factor past its range is
    refused by XPos.rotate, the module's entry: tests/rotary/test_xpos.py)."""
    from tests.test_host_reads import reads

    x = torch.randn(1, 1, 1, 4, dtype=torch.float16)
    positions = torch.tensor([5000])
    cos, sin = rope_cos_sin(positions, rope_inv_freq(4)[0])
    scale = xpos_scale(positions, xpos_zeta(4))
    out = []
    assert reads(lambda: out.append(apply_xpos(x, cos, sin, scale, key=True))) == []
    assert not torch.isfinite(out[0]).all()  # 2^17.6 is past float16's largest value
    assert reads(lambda: xpos_scale(torch.arange(3), xpos_zeta(4))) == []
