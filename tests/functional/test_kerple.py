"""KERPLE's kernels (Chi et al. 2022, arXiv:2205.09921) against their formulas, and the
straight-through clamp."""

import math

import pytest
import torch

from posenc.functional import KERPLE_VARIANTS, clamp_straight_through, kerple_bias


def reference(distance, r1, r2, variant):
    if variant == "log":
        return -r1 * math.log(1 + r2 * distance)
    return -r1 * distance**r2


@pytest.mark.parametrize("variant", KERPLE_VARIANTS)
def test_bias_matches_the_formula(variant, tol):
    distance = torch.tensor([0.0, 1.0, 2.0, 17.0, 1000.0, 123456.0], dtype=torch.float64)
    r1 = torch.tensor([[0.5], [2.0], [7.0]], dtype=torch.float64)  # [heads, 1]
    r2 = torch.tensor([[0.1], [1.0], [1.9]], dtype=torch.float64)
    expected = torch.tensor(
        [
            [reference(d, a, b, variant) for d in distance.tolist()]
            for a, b in zip(r1.flatten().tolist(), r2.flatten().tolist(), strict=True)
        ],
        dtype=torch.float64,
    )
    got = kerple_bias(distance, r1, r2, variant)
    # float64: a log1p or pow and two products, each rounded once
    torch.testing.assert_close(got, expected, **tol(torch.float64, n=4, scale=0))
    got32 = kerple_bias(distance.float(), r1.float(), r2.float(), variant)
    scale = expected.abs().max().item()
    torch.testing.assert_close(got32.double(), expected, **tol(torch.float32, n=4, scale=scale))


def test_bias_is_zero_at_distance_zero_and_decreasing():
    distance = torch.arange(100.0)
    for variant in KERPLE_VARIANTS:
        bias = kerple_bias(distance, torch.tensor(1.5), torch.tensor(0.7), variant)
        assert bias[0] == 0
        assert torch.all(bias[1:] < bias[:-1])


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="'cosine'"):
        kerple_bias(torch.ones(1), torch.ones(1), torch.ones(1), "cosine")


def test_clamp_straight_through_has_the_clamp_value_and_the_identity_gradient():
    x = torch.tensor([-1.0, 0.005, 0.5, 3.0], requires_grad=True)
    y = clamp_straight_through(x, 0.01, 2.0)
    assert torch.equal(y, x.detach().clamp(0.01, 2.0))
    y.backward(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert x.grad.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert torch.equal(clamp_straight_through(x, 0.01), x.detach().clamp(min=0.01))


def test_clamp_bounds_are_checked():
    with pytest.raises(ValueError, match="high must be >= low"):
        clamp_straight_through(torch.randn(3), 1.0, 0.5)
    with pytest.raises(ValueError, match="low must be finite"):
        clamp_straight_through(torch.randn(3), math.nan)
    out = clamp_straight_through(torch.tensor([-3.0, 0.5, 3.0]), -1.0, 1.0)
    assert out.tolist() == [-1.0, 0.5, 1.0]
