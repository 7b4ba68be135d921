"""ALiBi's math (Press et al. 2022, arXiv:2108.12409): slopes and bias against the paper's
formula and the reference code's slope rule, written as loops."""

import math

import pytest
import torch

from posenc.functional import alibi_bias, alibi_slope, alibi_slopes


def reference_slopes(n):
    """The paper's code (and BLOOM's build_alibi_tensor): the geometric sequence of the
    closest lower power of two, then every other slope of the next one."""

    def power_of_two(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 32, 40, 64, 96])
def test_slopes_match_the_reference_code(n_heads, tol):
    expected = torch.tensor(reference_slopes(n_heads), dtype=torch.float64)
    # the reference raises a rounded start to the power i (relative error up to i·eps, plus
    # the start's own roundings); posenc rounds exp2 of an exact exponent once
    rounding = tol(torch.float64, n=2 * n_heads + 2, scale=0)
    torch.testing.assert_close(alibi_slopes(n_heads), expected, **rounding)


@pytest.mark.parametrize("n_heads", [1, 3, 8, 12])
def test_slope_is_elementwise_slopes(n_heads):
    heads = torch.arange(n_heads, dtype=torch.float64)
    assert torch.equal(alibi_slope(heads, n_heads), alibi_slopes(n_heads))
    assert torch.equal(alibi_slopes(n_heads, dtype=torch.float32), alibi_slopes(n_heads).float())


def test_eight_heads_are_the_papers_example():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]


@pytest.mark.parametrize(
    ("bad", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError)]
)
def test_bad_head_count_raises(bad, error):
    with pytest.raises(error, match="n_heads"):
        alibi_slopes(bad)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("floating", [False, True])
def test_bias_is_minus_slope_times_distance(symmetric, floating):
    slopes = alibi_slopes(4)
    q_pos, k_pos = torch.tensor([0, 3, 7]), torch.arange(8)
    if floating:
        q_pos, k_pos = q_pos.double(), k_pos.double()
    expected = torch.empty(4, 3, 8, dtype=torch.float64)
    for h in range(4):
        for i, q in enumerate(q_pos.tolist()):
            for j, k in enumerate(k_pos.tolist()):
                distance = abs(q - k) if symmetric else q - k
                expected[h, i, j] = -slopes[h].item() * distance
    got = alibi_bias(slopes[:, None, None], q_pos[:, None], k_pos[None, :], symmetric)
    # one product of exact operands: one rounding
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_bias_at_huge_integer_positions_subtracts_before_the_cast():
    slope = torch.tensor(0.5, dtype=torch.float32)
    q_pos, k_pos = torch.tensor(2**40 + 3), torch.tensor(2**40)
    assert alibi_bias(slope, q_pos, k_pos).item() == -1.5


def test_bias_is_differentiable_in_the_slope():
    slope = torch.tensor([0.5, 0.25], dtype=torch.float64, requires_grad=True)
    q_pos, k_pos = torch.tensor([4.0], dtype=torch.float64), torch.tensor([1.0, 2.0]).double()
    alibi_bias(slope[:, None, None], q_pos[:, None], k_pos[None, :]).sum().backward()
    assert slope.grad.tolist() == [-5.0, -5.0]
