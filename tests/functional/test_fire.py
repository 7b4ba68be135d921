"""FIRE's math (Li et al. 2023, arXiv:2310.04418): ψ, the normalised input and the MLP,
against the paper's formula written as loops."""

import math

import pytest
import torch

from posenc.functional import FIRE_EPS, fire_input, fire_mlp, fire_psi


def psi(x, c):
    return math.log(abs(c * x) + 1)


@pytest.mark.parametrize("c", [0.5, 1.0, 3.0, -2.0])
def test_psi_is_log_of_c_x_plus_one(c):
    x = torch.tensor([0.0, 1.0, 5.0, 1e6], dtype=torch.float64)
    expected = torch.tensor([psi(v, c) for v in x.tolist()], dtype=torch.float64)
    torch.testing.assert_close(fire_psi(x, torch.tensor(c, dtype=torch.float64)), expected)


@pytest.mark.parametrize("threshold", [1.0, 4.0, 100.0])
def test_input_normalises_by_the_query_position_past_the_threshold(threshold):
    c = 1.7
    q_pos = torch.arange(12, dtype=torch.float64)
    k_pos = torch.arange(12, dtype=torch.float64)
    expected = torch.empty(12, 12, dtype=torch.float64)
    for i in range(12):
        for j in range(12):
            expected[i, j] = psi(abs(i - j), c) / (psi(max(threshold, i), c) + FIRE_EPS)
    got = fire_input(
        q_pos[:, None],
        k_pos[None, :],
        torch.tensor(c, dtype=torch.float64),
        torch.tensor(threshold, dtype=torch.float64),
    )
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=0)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    assert torch.all((got[causal] >= 0) & (got[causal] <= 1))


def test_mlp_is_two_linear_layers_per_head(tol):
    hidden, heads = 5, 3
    w1, b1 = torch.randn(hidden).double(), torch.randn(hidden).double()
    w2, b2 = torch.randn(heads, hidden).double(), torch.randn(heads).double()
    x = torch.rand(4, 6).double()
    expected = torch.empty(heads, 4, 6, dtype=torch.float64)
    for h in range(heads):
        for i in range(4):
            for j in range(6):
                act = [
                    max(0.0, w1[u].item() * x[i, j].item() + b1[u].item()) for u in range(hidden)
                ]
                expected[h, i, j] = b2[h].item() + sum(
                    w2[h, u].item() * act[u] for u in range(hidden)
                )
    head = torch.arange(heads)[:, None, None]
    got = fire_mlp(x, head, w1, b1, w2, b2)
    scale = (w2.abs() @ (w1.abs() + b1.abs())).max().item() + b2.abs().max().item()
    torch.testing.assert_close(got, expected, **tol(torch.float64, n=2 * hidden + 2, scale=scale))
    # torch.nn's layers give the same
    mlp = torch.nn.Sequential(
        torch.nn.Linear(1, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, heads)
    )
    mlp = mlp.double()
    with torch.no_grad():
        mlp[0].weight.copy_(w1[:, None]), mlp[0].bias.copy_(b1)
        mlp[2].weight.copy_(w2), mlp[2].bias.copy_(b2)
    torch.testing.assert_close(
        got, mlp(x[..., None]).permute(2, 0, 1), **tol(torch.float64, n=2 * hidden + 2, scale=scale)
    )


def test_mlp_weights_of_other_sizes_are_named():
    w1, b1, w2, b2 = torch.randn(8), torch.randn(8), torch.randn(3, 8), torch.randn(3)
    x = torch.rand(2, 2)
    with pytest.raises(ValueError, match=r"w1, b1 must be \[hidden\]"):
        fire_mlp(x, torch.tensor(0), w1, b1[:4], w2, b2)
    with pytest.raises(TypeError, match="head must be an integer tensor"):
        fire_mlp(x, torch.tensor(0.0), w1, b1, w2, b2)
    with pytest.raises(ValueError, match="eps must be > 0"):
        fire_input(x, x, torch.tensor(1.0), torch.tensor(1.0), eps=0.0)
