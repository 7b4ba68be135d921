"""KERPLE: the log and power kernels against the paper's formulas, the sign convention,
positivity, properties and KV-cache decoding (every attention backend:
tests/attn/test_backends.py)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from posenc.bias.kerple import Kerple
from posenc.functional.kerple import clamp_straight_through, kerple_bias
from posenc.models import TransformerLM

VARIANTS = ["log", "power"]


def naive_bias(enc, q_positions, k_positions):
    """A loop over heads and positions, straight from the paper's formulas (float64)."""
    eps = torch.tensor(enc.config.eps).item()  # eps as a float32 parameter holds it
    out = torch.empty(enc.n_heads, len(q_positions), len(k_positions), dtype=torch.float64)
    for h in range(enc.n_heads):
        r1 = max(enc.r1[h].item(), eps)
        r2 = max(enc.r2[h].item(), eps)
        for a, m in enumerate(q_positions.tolist()):
            for b, n in enumerate(k_positions.tolist()):
                d = abs(m - n)
                if enc.config.variant == "log":
                    out[h, a, b] = -r1 * math.log(1 + r2 * d)
                else:
                    out[h, a, b] = -r1 * d ** min(r2, 2.0)
    return out


def randomize(enc, low=0.1, high=1.9):
    with torch.no_grad():
        enc.r1.uniform_(low, high)
        enc.r2.uniform_(low, high)
    return enc


def bias_tol(tol, enc, expected):
    """A float32 bias: a few roundings (r2·d, 1 + ·, the log or the power, r1·) of terms up
    to |bias|; the 1 in log(1 + r2·d) rounds at eps·r1."""
    return tol(n=4, scale=expected.abs().max().item() + enc.r1.abs().max().item())


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_the_formula(variant, tol):
    enc = randomize(Kerple(n_heads=4, variant=variant))
    q_pos, k_pos = torch.tensor([0, 3, 7, 100]), torch.arange(12)
    expected = naive_bias(enc, q_pos, k_pos)
    rounding = bias_tol(tol, enc, expected)
    assert_close(enc.bias(q_pos, k_pos), expected.float(), **rounding)
    # float positions and batched positions give the same values
    assert_close(enc.bias(q_pos.double(), k_pos.double()), expected)
    assert_close(enc.bias(q_pos.float() + 0.5, k_pos.float() + 0.5), expected.float(), **rounding)
    batched = enc.bias(torch.stack((q_pos, q_pos + 5)), torch.stack((k_pos, k_pos + 5)))
    assert batched.shape == (2, 4, 4, 12)
    assert_close(batched, expected.float().expand(2, -1, -1, -1), **rounding)


def test_functional_kernels_and_the_power_kernel_at_exponent_one_is_alibi():
    d = torch.tensor([0.0, 1.0, 2.0, 10.0])
    r1, r2 = torch.tensor(0.5), torch.tensor(0.25)
    assert_close(kerple_bias(d, r1, r2, "log"), -0.5 * torch.log(1 + 0.25 * d))
    assert_close(kerple_bias(d, r1, r2, "power"), -0.5 * d**0.25)
    assert_close(kerple_bias(d, r1, torch.tensor(1.0), "power"), -0.5 * d)  # ALiBi, slope r1
    with pytest.raises(ValueError, match="variant must be one of"):
        kerple_bias(d, r1, r2, "cosine")


@pytest.mark.parametrize("variant", VARIANTS)
def test_reference_initialisation(variant):
    torch.manual_seed(1)
    enc = Kerple(n_heads=4096, variant=variant)
    r1_max, r2_max = {"log": (2.0, 1.0), "power": (1.0, 2.0)}[variant]
    for p, high in ((enc.r1, r1_max), (enc.r2, r2_max)):
        assert p.shape == (4096,)
        assert p.min() >= torch.tensor(enc.config.eps) and p.max() <= high
        assert abs(p.mean().item() - high / 2) < 0.05 * high  # uniform in (0, high)
    small = Kerple(n_heads=64, variant=variant, init_r1_max=0.5, init_r2_max=0.25)
    assert small.r1.max() <= 0.5 and small.r2.max() <= 0.25


@pytest.mark.parametrize("variant", VARIANTS)
def test_farther_keys_get_lower_scores(variant, tol):
    """The sign convention: 0 at distance 0, strictly decreasing with the distance, for
    every head; parameters pushed below 0 are used as eps, so this holds after any step."""
    enc = randomize(Kerple(n_heads=8, variant=variant))
    with torch.no_grad():
        enc.r1[:2] = -3.0
        enc.r2[2:4] = -0.5
    q = torch.tensor([50])
    row = enc.bias(q, torch.arange(51)).flip(-1)[:, 0]  # [heads, distance 0..50]
    assert torch.equal(row[:, 0], torch.zeros(8))  # log(1) and 0^r are exactly 0
    assert (row[:, 1:] < row[:, :-1]).all()
    expected = naive_bias(enc, q, torch.arange(51))
    assert_close(enc.bias(q, torch.arange(51)), expected.float(), **bias_tol(tol, enc, expected))
    # symmetric: the same for keys after the query (bidirectional attention): the same
    # distances, but in other places of the vectorised loops
    after = enc.bias(torch.tensor([0]), torch.arange(51))[:, 0]
    assert_close(after, row, **bias_tol(tol, enc, expected))


def test_out_of_range_parameters_are_clamped_and_still_get_the_gradient():
    enc = Kerple(n_heads=3, variant="power")
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([-1.0, 0.001, 0.7]))
        enc.r2.copy_(torch.tensor([0.5, 5.0, -2.0]))
    r1, r2 = enc.kernel_parameters(torch.arange(3))
    assert torch.equal(r1, torch.tensor([0.01, 0.01, 0.7]))
    assert torch.equal(r2, torch.tensor([0.5, 2.0, 0.01]))  # the exponent is capped at 2
    bias = enc.bias(torch.arange(4), torch.arange(4))
    bias.sum().backward()
    # the straight-through gradient is the gradient at the clamped value
    clamped = Kerple(n_heads=3, variant="power")
    with torch.no_grad():
        clamped.r1.copy_(r1)
        clamped.r2.copy_(r2)
    clamped.bias(torch.arange(4), torch.arange(4)).sum().backward()
    assert_close(enc.r1.grad, clamped.r1.grad)
    assert_close(enc.r2.grad, clamped.r2.grad)
    assert (enc.r1.grad != 0).all() and (enc.r2.grad != 0).all()
    x = torch.tensor([-1.0, 0.5, 3.0], requires_grad=True)
    y = clamp_straight_through(x, 0.01, 2.0)
    assert torch.equal(y, torch.tensor([0.01, 0.5, 2.0]))
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones(3))


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradients_flow_at_init(variant):
    enc = Kerple(n_heads=16, variant=variant)
    enc.bias(torch.arange(6), torch.arange(6)).sum().backward()
    assert (enc.r1.grad < 0).all()  # a larger scale lowers every off-diagonal bias
    assert (enc.r2.grad != 0).all()


@given(
    variant=st.sampled_from(VARIANTS),
    r1=st.floats(0.01, 4.0),
    r2=st.floats(0.01, 2.0),
    m=st.integers(0, 1000),
    n=st.integers(0, 1000),
    shift=st.integers(0, 1000),
)
def test_depends_only_on_distance_and_is_monotone(variant, r1, r2, m, n, shift):
    enc = Kerple(n_heads=1, variant=variant)
    with torch.no_grad():
        enc.r1.fill_(r1)
        enc.r2.fill_(r2)

    def b(q, k):
        return enc.bias(torch.tensor([q]), torch.tensor([k])).item()

    value = b(m, n)
    # one score each: the same distance (exact in float32), the same operations
    assert value == b(m + shift, n + shift) == b(n, m) == b(abs(m - n), 0)
    assert b(abs(m - n) + 1, 0) <= value <= 0.0


def test_config_is_validated():
    with pytest.raises(ValueError, match="variant must be one of"):
        Kerple(n_heads=2, variant="exp")
    with pytest.raises(ValueError, match=r"init_r2_max must be <= 2\.0"):
        Kerple(n_heads=2, variant="power", init_r2_max=3.0)
    with pytest.raises(ValueError, match="eps must be > 0"):
        Kerple(n_heads=2, eps=0.0)
    with pytest.raises(TypeError, match="init_r1_max must be a number"):
        Kerple(n_heads=2, init_r1_max="1")
    assert Kerple(n_heads=2, variant="log", init_r2_max=3.0).config.init_bounds() == (2.0, 3.0)


def test_cached_generation_equals_recomputation(check_cached_decoding):
    torch.manual_seed(0)
    model = TransformerLM(
        vocab_size=37,
        dim=32,
        n_layers=2,
        n_heads=4,
        encoding={"name": "kerple", "variant": "power"},
    ).eval()
    randomize(model.encoding, 0.5, 2.0)  # a strong bias, so a wrong one changes the tokens
    check_cached_decoding(model, torch.randint(0, 37, (2, 6)), 10)
