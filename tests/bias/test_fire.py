"""FIRE: the bias against the paper's formula (max, not min, in the normaliser), its
properties and KV-cache decoding (every attention backend: tests/attn/test_backends.py)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from posenc.bias import fire as fire_module
from posenc.bias.fire import Fire
from posenc.functional import compiled
from posenc.functional.fire import FIRE_EPS, fire_input, fire_mlp
from posenc.models import TransformerLM


def naive_bias(enc, q_positions, k_positions, normalise=max):
    """A loop over heads and positions, straight from the paper's formula (float64):
    f_θ(ψ(|i - j|) / ψ(normalise(L, i))), ψ(x) = log(c·x + 1), f_θ a ReLU MLP."""
    c = enc.c.item()
    threshold = abs(enc.threshold_scale.item()) * enc.config.init_threshold
    w1 = enc.mlp[0].weight[:, 0].tolist()
    b1, w2, b2 = enc.mlp[0].bias.tolist(), enc.mlp[2].weight.tolist(), enc.mlp[2].bias.tolist()

    def psi(x):
        return math.log(abs(c * x) + 1)

    out = torch.empty(enc.n_heads, len(q_positions), len(k_positions), dtype=torch.float64)
    for a, i in enumerate(q_positions.tolist()):
        for b, j in enumerate(k_positions.tolist()):
            x = psi(abs(i - j)) / (psi(normalise(threshold, i)) + FIRE_EPS)
            hidden = [max(0.0, w * x + bias) for w, bias in zip(w1, b1, strict=True)]
            for h in range(enc.n_heads):
                out[h, a, b] = b2[h] + sum(w * z for w, z in zip(w2[h], hidden, strict=True))
    return out


def make(n_heads=4, init_threshold=8.0, hidden=32):
    """A FIRE whose threshold is crossed at small positions, with parameters off their
    initial values (c != 0.1, L != init_threshold)."""
    enc = Fire(n_heads=n_heads, hidden=hidden, init_threshold=init_threshold)
    with torch.no_grad():
        enc.c.fill_(0.7)
        enc.threshold_scale.fill_(1.25)  # L = 10 for init_threshold 8
    return enc


def bias_tol(tol, enc, x_max=4.0):
    """Tolerance of a float32 bias: x = ψ(|i - j|) / ψ(max(L, i)) (a few roundings, x below
    ``x_max`` for the positions in these tests), then a sum over the hidden units of
    w2·relu(w1·x + b1), plus b2: hidden + 8 roundings of terms up to Σ|w2|·(|w1|·x_max +
    |b1|) + |b2|."""
    first, second = enc.mlp[0], enc.mlp[2]
    hidden = first.weight[:, 0].abs() * x_max + first.bias.abs()
    terms = second.weight.abs() @ hidden + second.bias.abs()  # [heads]
    return tol(n=enc.config.hidden + 8, scale=terms.max().item())


@pytest.fixture(params=["matmul", "pieces"])
def mlp_form(request, monkeypatch):
    """Fire's bias by the MLP's matrix products (small inputs, or no vectorising inductor)
    or by pieces, forced on every size and run eagerly (the compiled kernels equal the eager
    functions: tests/functional/test_fire_pieces.py (functional/fire.py); compiling each
    dtype and rank
    here would cost the suite 20 s on a cold cache)."""
    if request.param == "pieces":
        monkeypatch.setattr(compiled, "ENABLED", False)
        monkeypatch.setattr(fire_module, "pieces_pay", lambda scores, device: True)
    return request.param


def test_matches_the_formula_below_and_above_the_threshold(tol, mlp_form):
    enc = make()
    rounding = bias_tol(tol, enc)
    q_pos, k_pos = torch.tensor([0, 3, 9, 10, 11, 25, 100]), torch.arange(30)
    expected = naive_bias(enc, q_pos, k_pos)
    assert_close(enc.bias(q_pos, k_pos), expected.float(), **rounding)
    assert_close(enc.bias(q_pos.double(), k_pos.double()), expected)
    batched = enc.bias(torch.stack((q_pos, q_pos)), torch.stack((k_pos, k_pos)))
    assert batched.shape == (2, 4, 7, 30)
    assert_close(batched, expected.float().expand(2, -1, -1, -1), **rounding)
    # fractional positions
    q_frac, k_frac = torch.tensor([2.5, 17.25]), torch.tensor([0.0, 1.5, 17.25])
    assert_close(enc.bias(q_frac, k_frac), naive_bias(enc, q_frac, k_frac).float(), **rounding)


def test_the_normaliser_uses_the_max_not_the_min(tol, mlp_form):
    enc = make()  # L = 10
    q, k = torch.tensor([40]), torch.tensor([0, 20, 39])
    got = enc.bias(q, k)
    assert_close(got, naive_bias(enc, q, k, max).float(), **bias_tol(tol, enc))
    wrong = naive_bias(enc, q, k, min).float()
    assert (got - wrong).abs().max() > 1e-2
    # the MLP input of every visible pair lies in [0, 1] (with the min it reaches ψ(40)/ψ(10))
    positions = torch.arange(60.0)
    x = fire_input(positions[:, None], positions, enc.c.detach(), enc.threshold().detach())
    visible = x[torch.ones(60, 60).tril().bool()]
    assert visible.min() >= 0 and visible.max() <= 1
    expected = torch.tensor(math.log(1 + 0.7 * 40) / (math.log(1 + 0.7 * 40) + 1e-6))
    assert_close(x[40, 0], expected, **tol(n=8))  # logs, a quotient: a few roundings


def test_the_unrolled_mlp_equals_the_module_mlp(tol):
    enc = make(n_heads=6, hidden=16)
    x = torch.rand(5, 7)
    heads = torch.arange(6).view(-1, 1, 1)
    first, second = enc.mlp[0], enc.mlp[2]
    got = fire_mlp(x, heads, first.weight[:, 0], first.bias, second.weight, second.bias)
    expected = enc.mlp(x.unsqueeze(-1)).permute(2, 0, 1)  # [5, 7, heads] -> [heads, 5, 7]
    assert_close(got, expected, **bias_tol(tol, enc, x_max=1.0))  # two orders of one sum


def test_paper_initialisation_and_gradients_at_init():
    enc = Fire(n_heads=4)
    assert enc.config.hidden == 32 and enc.mlp[0].weight.shape == (32, 1)
    assert enc.mlp[2].weight.shape == (4, 32)
    assert enc.c.item() == pytest.approx(0.1) and enc.threshold().item() == 512.0
    assert isinstance(enc.mlp[1], torch.nn.ReLU)
    # queries below L = 512, so the normaliser ψ(L) depends on the threshold
    enc.bias(torch.arange(100, 106), torch.arange(106)).square().sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_bidirectional_uses_the_absolute_distance(tol):
    enc = make()
    rounding = bias_tol(tol, enc)
    positions = torch.arange(20)
    bias = enc.bias(positions, positions)
    assert_close(bias, naive_bias(enc, positions, positions).float(), **rounding)
    # below the threshold the bias is symmetric; above it, the query position normalises.
    # (i, j) and (j, i) have the same MLP input, but sit elsewhere in the vectorised sums
    assert_close(bias[:, :10, :10], bias[:, :10, :10].transpose(-1, -2), **rounding)
    assert (bias[:, 15, 3] - bias[:, 3, 15]).abs().max() > 1e-3


@given(
    i=st.integers(0, 64),
    j=st.integers(0, 64),
    shift=st.integers(0, 64),
    c=st.floats(0.01, 5.0),
    threshold=st.integers(1, 128),
)
def test_below_the_threshold_the_bias_depends_on_the_distance_only(i, j, shift, c, threshold, tol):
    enc = Fire(n_heads=3, hidden=8, init_threshold=float(threshold))
    with torch.no_grad():
        enc.c.fill_(c)
    rounding = bias_tol(tol, enc)  # x < 4 for these positions (past L: ψ(|i - j|) / ψ(i))

    def b(q, k):
        return enc.bias(torch.tensor([q]), torch.tensor([k]))[:, 0, 0]

    if max(i, j) + shift <= threshold:  # both queries at most L: the normaliser is ψ(L)
        assert_close(b(i + shift, j + shift), b(i, j), **rounding)
        assert_close(b(i, j), b(j, i), **rounding)
    if i > threshold:  # past L the normaliser is ψ(i): the input is ψ(i - j) / ψ(i)
        x = math.log1p(c * abs(i - j)) / (math.log1p(c * i) + FIRE_EPS)
        first, second = enc.mlp[0], enc.mlp[2]
        hidden = torch.relu(first.weight[:, 0] * x + first.bias)
        assert_close(b(i, j), second.weight @ hidden + second.bias, **rounding)


def test_config_is_validated():
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        Fire(n_heads=2, hidden=0)
    with pytest.raises(ValueError, match="init_threshold must be > 0"):
        Fire(n_heads=2, init_threshold=-1.0)
    with pytest.raises(TypeError, match="init_c must be a number"):
        Fire(n_heads=2, init_c=None)


def test_cached_generation_equals_recomputation(check_cached_decoding):
    torch.manual_seed(0)
    spec = {"name": "fire", "init_threshold": 4.0}  # generation runs past the threshold
    model = TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding=spec).eval()
    with torch.no_grad():
        model.encoding.mlp[2].weight.mul_(8.0)  # a strong bias, so a wrong one shows
    check_cached_decoding(model, torch.randint(0, 37, (2, 6)), 10)
