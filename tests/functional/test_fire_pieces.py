"""FIRE's MLP by pieces (posenc.functional.fire) against the MLP itself: values and
gradients (float64), units without a kink, inputs on a kink, masked scores, the written-out
backward against autograd, and the pieces within a bound. The compiled kernels:
tests/functional/test_fire_rows.py."""

import pytest
import torch

from posenc.functional import fire as fp
from posenc.functional.fire import (
    evaluate_pieces,
    fire_mlp,
    fire_mlp_matmul,
    fire_mlp_pieces,
    fire_pieces,
    pieces_backward,
)


def mlp(hidden=6, heads=3, dtype=torch.float64, flat=()):
    """Random weights (units in ``flat`` with ``w1 = 0``: no kink), requiring grad."""
    gen = torch.Generator().manual_seed(hidden * 31 + heads)
    w1, b1 = torch.randn(hidden, generator=gen), torch.randn(hidden, generator=gen)
    w1[list(flat)] = 0.0
    w2, b2 = torch.randn(heads, hidden, generator=gen), torch.randn(heads, generator=gen)
    return [t.to(dtype).requires_grad_() for t in (w1, b1, w2, b2)]


def per_head(x, w1, b1, w2, b2):
    """The MLP as :func:`fire_mlp` computes it, heads last: ``[..., heads]``."""
    heads = torch.arange(w2.shape[0]).view(-1, *([1] * x.dim()))
    return fire_mlp(x, heads, w1, b1, w2, b2).movedim(0, -1)


def scale_of(w1, b1, w2, b2, x_max):
    """Σ|terms| of one output: |b2| + Σ_k |w2|·(|w1|·x_max + |b1|)."""
    return ((w2.abs() @ (w1.abs() * x_max + b1.abs())) + b2.abs()).max().item()


def test_pieces_of_a_two_unit_mlp_by_hand():
    # relu(x) + relu(1 - x): kinks 0 and 1 (-0.0 is 0)
    kinks, slope, offset = fire_pieces(
        torch.tensor([1.0, -1.0]), torch.tensor([0.0, 1.0]), torch.ones(1, 2), torch.zeros(1)
    )
    assert kinks.tolist() == [0.0, 1.0]
    assert slope[:, 0].tolist() == [-1.0, 0.0, 1.0]  # below 0: only 1 - x; between: both
    assert offset[:, 0].tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize("flat", [(), (0, 3)])
def test_equals_the_mlp_forward_and_backward_float64(flat, tol):
    weights = mlp(flat=flat)
    x = (torch.rand(5, 40, dtype=torch.float64) * 6 - 3).requires_grad_()  # kinks in range
    got, want = fire_mlp_pieces(x, *weights), per_head(x, *weights)
    scale = scale_of(*weights, x_max=3.0)
    torch.testing.assert_close(got, want, **tol(torch.float64, n=2 * 6 + 4, scale=scale))
    grad = torch.randn(got.shape, dtype=torch.float64)
    inputs = [x, *weights]
    for g, w in zip(
        torch.autograd.grad(got, inputs, grad), torch.autograd.grad(want, inputs, grad), strict=True
    ):
        # a sum over up to 200 scores of products of terms up to ``scale``
        torch.testing.assert_close(g, w, **tol(torch.float64, n=250, scale=200 * scale))


def test_an_input_on_a_kink_gives_the_value_of_both_pieces(tol):
    w1, b1, w2, b2 = mlp()
    kinks, _, _ = fire_pieces(w1, b1, w2, b2)
    x = kinks.detach().clone()  # every input exactly on a kink
    got = fire_mlp_pieces(x, w1, b1, w2, b2)
    scale = scale_of(w1, b1, w2, b2, x_max=x.abs().max().item())
    torch.testing.assert_close(
        got, per_head(x, w1, b1, w2, b2), **tol(torch.float64, n=16, scale=scale)
    )


def test_masked_scores_are_minus_inf_and_get_no_gradient():
    w1, b1, w2, b2 = mlp()
    x = torch.rand(4, 5, dtype=torch.float64, requires_grad=True)
    masked = torch.ones(4, 5, dtype=torch.bool).triu(1)
    out = fire_mlp_pieces(x, w1, b1, w2, b2, masked)
    assert torch.isneginf(out[masked]).all() and torch.isfinite(out[~masked]).all()
    grads = torch.autograd.grad(out[~masked].sum(), [x, w1, b1, w2, b2])
    plain = fire_mlp_pieces(x, w1, b1, w2, b2)
    want = torch.autograd.grad(plain[~masked].sum(), [x, w1, b1, w2, b2])
    assert (grads[0][masked] == 0).all()
    for g, w in zip(grads, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_the_written_out_backward_equals_autograd(tol):
    w1, b1, w2, b2 = (w.detach() for w in mlp(hidden=8, heads=3))
    kinks, slope, offset = fire_pieces(w1, b1, w2, b2)
    x = torch.rand(2, 9, 11, dtype=torch.float64) * 6 - 3
    masked = torch.rand(9, 11) < 0.2
    slope, offset = slope.requires_grad_(), offset.requires_grad_()
    x_grad = x.clone().requires_grad_()
    out = evaluate_pieces(x_grad, kinks, slope, offset, masked)
    assert out.shape == (3, 2, 9, 11) and torch.isneginf(out[:, :, masked]).all()
    grad = torch.randn(out.shape, dtype=torch.float64)
    want = torch.autograd.grad(out, [x_grad, slope, offset], grad)
    got = pieces_backward(x, kinks, slope.detach(), grad, masked)
    # sums over up to 198 scores of |grad|·|x| (x within 3), each piece's a difference of two
    terms = 3 * grad.abs().sum().item()
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **tol(torch.float64, n=2 * x.numel(), scale=terms))


def test_the_pieces_within_a_bound_give_the_same_values():
    w1, b1, w2, b2 = (w.detach() for w in mlp(hidden=12, heads=3))
    pieces = fire_pieces(w1, b1, w2, b2)
    x = torch.rand(500, dtype=torch.float64) * 0.8
    x[:3] = torch.tensor([0.0, 0.8, 0.4])
    kinks, slope, offset = fp.pieces_within(*pieces, 0.8)
    inside = int(((pieces[0] >= 0) & (pieces[0] <= 0.8)).sum())
    assert kinks.shape[0] % fp.KINK_STEP == 0 and kinks.shape[0] - inside < fp.KINK_STEP
    assert torch.isinf(kinks[inside:]).all() and slope.shape == (kinks.shape[0] + 1, 3)
    # the same piece for every input: equal, not merely close
    assert torch.equal(evaluate_pieces(x, kinks, slope, offset), evaluate_pieces(x, *pieces))


def test_the_matrix_product_form_equals_the_mlp(tol):
    w1, b1, w2, b2 = (w.detach() for w in mlp(hidden=7, heads=3))
    x = torch.rand(2, 5, 9, dtype=torch.float64) * 4 - 2
    got = fire_mlp_matmul(x, w1, b1, w2, b2)
    assert got.shape == (2, 3, 5, 9)
    want = per_head(x, w1, b1, w2, b2).movedim(-1, -3)
    torch.testing.assert_close(
        got, want, **tol(torch.float64, n=2 * 7 + 4, scale=scale_of(w1, b1, w2, b2, x_max=2.0))
    )


@pytest.mark.parametrize("flat", [(), (0, 3)])
def test_the_units_within_a_bound_equal_the_mlp_forward_and_backward(flat, tol):
    """Only the units that bend inside ``[0, bound]`` keep their ReLU; the others fold into
    ``b2`` and one linear unit. Float64 values and the gradients of x and every weight, at
    the ends of the range too; a kink on 0 and one on the bound stay units."""
    w1, b1, w2, b2 = mlp(hidden=12, heads=3, flat=flat)
    with torch.no_grad():
        b1[1], b1[2] = 0.0, -0.8 * w1[2]  # kinks at 0 and at the bound
    bound = 0.8
    kinks = -b1 / w1
    x = torch.rand(10, 30, dtype=torch.float64) * bound
    x[0, :3] = torch.tensor([0.0, bound, 0.4])
    x.requires_grad_()
    small = fp.units_within(w1, b1, w2, b2, bound)
    bends = (w1 != 0) & (kinks >= 0) & (kinks <= bound)
    assert small[0].shape == (int(bends.sum()) + 1,) and bool(bends[1] & bends[2])
    got, want = fire_mlp_matmul(x, *small), fire_mlp_matmul(x, w1, b1, w2, b2)
    scale = scale_of(w1, b1, w2, b2, x_max=bound)
    torch.testing.assert_close(got, want, **tol(torch.float64, n=2 * 12 + 4, scale=scale))
    grad = torch.randn(got.shape, dtype=torch.float64)
    inputs = [x, w1, b1, w2, b2]
    for g, w in zip(
        torch.autograd.grad(got, inputs, grad), torch.autograd.grad(want, inputs, grad), strict=True
    ):
        torch.testing.assert_close(g, w, **tol(torch.float64, n=2 * 300, scale=300 * scale))
