"""FIRE's bias rows in one kernel each way (posenc.functional.fire_rows) against FIRE's
formula differentiated by autograd: values and the gradients of c, the threshold and the
MLP's weights (float64, a tie at the threshold, a negative c, batched and fractional
positions, masked scores), the compiled kernels against the same functions run eagerly,
and the input's partial derivatives and largest value (posenc.functional.fire)."""

import pytest
import torch

from posenc.functional import compiled as compiled_mod
from posenc.functional import fire_rows as fr
from posenc.functional.cpu import cpu_vector_isa
from posenc.functional.fire import (
    fire_input,
    fire_input_bound,
    fire_input_partials,
    fire_mlp,
    fire_pieces,
    pieces_within,
)


def weights(hidden=6, heads=3, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w1, b1 = torch.randn(hidden, generator=gen), torch.randn(hidden, generator=gen) * 0.5
    w2, b2 = torch.randn(heads, hidden, generator=gen), torch.randn(heads, generator=gen)
    return [t.to(dtype).requires_grad_() for t in (w1, b1, w2, b2)]


def reference(q_pos, k_pos, c, threshold, w1, b1, w2, b2):
    """FIRE's bias per head from its formula: ``[heads, (batch,) q, k]``."""
    x = fire_input(q_pos, k_pos, c, threshold)
    heads = torch.arange(w2.shape[0]).view(-1, *([1] * x.dim()))
    return fire_mlp(x, heads, w1, b1, w2, b2)


CASES = {
    # queries on both sides of the threshold, one exactly on it (torch.maximum splits a tie)
    "unbatched": (torch.arange(0.0, 30)[:, None], torch.arange(0.0, 30)[None], 0.3, 12.0),
    "negative c": (torch.arange(0.0, 20)[:, None], torch.arange(0.0, 20)[None], -0.7, 5.0),
    "batched": (
        torch.tensor([[3.0, 9.5, 17.0], [0.0, 4.0, 40.0]])[..., None],
        torch.tensor([[0.0, 1.5, 9.5, 17.0], [2.0, 3.0, 4.0, 5.0]])[:, None],
        0.1,
        8.0,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_the_formula_forward_and_backward_float64(case, tol):
    q_pos, k_pos, c0, l0 = CASES[case]
    q_pos, k_pos = q_pos.double(), k_pos.double()
    c = torch.tensor(c0, dtype=torch.float64, requires_grad=True)
    threshold = torch.tensor(l0, dtype=torch.float64, requires_grad=True)
    net = weights()
    masked = k_pos > q_pos if case == "unbatched" else None
    got = fr.fire_rows(q_pos, k_pos, c, threshold, *fire_pieces(*net), masked)
    want = reference(q_pos, k_pos, c, threshold, *net).movedim(0, -3)
    if masked is not None:
        want = want.masked_fill(masked, float("-inf"))
        assert torch.isneginf(got[:, masked]).all()
    assert got.shape == want.shape
    # the MLP's sum over 6 units of terms up to about 10, the input a few roundings
    torch.testing.assert_close(got, want, **tol(torch.float64, n=16, scale=10.0))
    grad = torch.randn(got.shape, dtype=torch.float64)
    if masked is not None:
        grad = grad.masked_fill(masked, 0.0)  # a masked score's gradient means nothing
    inputs = [c, threshold, *net]
    finite = torch.where(torch.isinf(want), 0.0, want)
    for g, w in zip(
        torch.autograd.grad(got, inputs, grad),
        torch.autograd.grad(finite, inputs, grad),
        strict=True,
    ):
        scale = grad.abs().sum().item() * 10.0  # a sum over the scores of |grad|·(a term)
        torch.testing.assert_close(g, w, **tol(torch.float64, n=grad.numel(), scale=scale))


@pytest.mark.skipif(not cpu_vector_isa(), reason="inductor has no vector ISA on this CPU")
# the kernels unroll over the MLP's pieces: 8 hidden units compile in about half the time
# of FIRE's default 32 (13 s against 22 s on a cold cache); batched positions compile their
# own graphs: make test-slow runs them with 32 units
@pytest.mark.parametrize(
    ("batched", "hidden"), [(False, 8), pytest.param(True, 32, marks=pytest.mark.slow)]
)
def test_compiled_kernels_equal_the_eager_functions(batched, hidden, monkeypatch, tol):
    monkeypatch.setattr(compiled_mod, "ENABLED", True)
    net = weights(hidden=hidden, heads=8, dtype=torch.float32)
    q_pos, k_pos = torch.arange(64.0, 112.0)[:, None], torch.arange(130.0)[None]
    if batched:
        q_pos, k_pos = torch.stack([q_pos, q_pos + 3]), torch.stack([k_pos, k_pos + 1])
    c = torch.tensor(0.1, requires_grad=True)
    threshold = torch.tensor(80.0, requires_grad=True)
    masked = torch.rand(48, 130) < 0.2
    bound = float(fire_input_bound(q_pos, k_pos, c, threshold).detach()) * 1.0001
    grad = torch.randn(*q_pos.shape[:-2], 8, 48, 130)
    results = []
    for threshold_scores in (0, 10**9):  # compiled, then eager
        monkeypatch.setattr(fr, "COMPILE_MIN_SCORES", threshold_scores)
        pieces = pieces_within(*fire_pieces(*net), bound)
        out = fr.fire_rows(q_pos, k_pos, c, threshold, *pieces, masked)
        results.append((out, *torch.autograd.grad(out, [c, threshold, *net], grad)))
    assert fr._FORWARD.failed is None and fr._BACKWARD.failed is None
    (out, eager), *grads = zip(*results, strict=True)
    # a value: a slope times the input plus an offset, each a sum of up to 32 units' terms
    terms = (net[2].abs() @ (net[0].abs() + net[1].abs()) + net[3].abs()).max().item()
    torch.testing.assert_close(out, eager, **tol(torch.float32, n=40, scale=terms))
    # each gradient: a sum over the scores of |grad|·(a term of a value or its derivative)
    total = grad.abs().sum().item() * max(terms, 1.0)
    for got, want in grads:
        torch.testing.assert_close(got, want, **tol(torch.float32, n=grad.numel(), scale=total))


@pytest.mark.parametrize(("c", "threshold"), [(0.3, 12.0), (-0.7, 5.0), (0.0, 3.0), (2.0, 0.0)])
def test_the_input_partials_equal_autograd(c, threshold, tol):
    q_pos, k_pos = torch.arange(0.0, 25).double()[:, None], torch.arange(0.0, 25).double()[None]
    c_t = torch.tensor(c, dtype=torch.float64, requires_grad=True)
    l_t = torch.tensor(threshold, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(25, 25, dtype=torch.float64)
    want = torch.autograd.grad(fire_input(q_pos, k_pos, c_t, l_t), [c_t, l_t], grad)
    x, d_c, d_threshold = fire_input_partials(q_pos, k_pos, c_t.detach(), l_t.detach())
    assert torch.equal(x, fire_input(q_pos, k_pos, c_t.detach(), l_t.detach()))
    for got, w in zip(((grad * d_c).sum(), (grad * d_threshold).sum()), want, strict=True):
        scale = (grad.abs() * 25).sum().item()  # |∂x/∂c| is at most about the distance
        torch.testing.assert_close(got, w, **tol(torch.float64, n=16 * 625, scale=scale))


def test_the_bound_is_the_largest_input():
    q_pos = torch.tensor([[0.0, 5.0, 30.0], [2.0, 3.0, 4.0]])
    k_pos = torch.tensor([[1.0, 7.0, 29.0, 60.0], [0.0, 1.0, 2.0, 3.0]])
    c, threshold = torch.tensor(0.2), torch.tensor(6.0)
    every = fire_input(q_pos[..., None], k_pos[:, None], c, threshold)
    bound = fire_input_bound(q_pos, k_pos, c, threshold)
    assert bound.dim() == 0
    torch.testing.assert_close(bound, every.max(), rtol=1e-6, atol=0.0)
