"""The sinusoidal modules: the article's worked example, forward semantics, the scaled variant."""

import pytest
import torch

import posenc
from posenc.functional import sinusoidal


def test_article_worked_example():
    """'DataCamp' [0.51, -0.22, 0.88, 0.14] at position 0 plus [0, 1, 0, 1]."""
    enc = posenc.create("sinusoidal", dim=4)
    token = torch.tensor([0.51, -0.22, 0.88, 0.14])
    torch.testing.assert_close(enc.encode(torch.tensor([0]))[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    at0 = enc(token.view(1, 1, 4))
    torch.testing.assert_close(at0[0, 0], torch.tensor([0.51, 0.78, 0.88, 1.14]))
    at5 = enc(token.view(1, 1, 4), positions=torch.tensor([5]))
    assert (at5 - at0).abs().max() > 0.5  # the same token reads differently at position 5
    torch.testing.assert_close(at5[0, 0], token + sinusoidal(torch.tensor(5), 4))


def test_forward_adds_encoding_at_default_and_explicit_positions():
    enc = posenc.create("sinusoidal", dim=8)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(enc(x), x + sinusoidal(torch.arange(5), 8))
    positions = torch.tensor([[3, 4, 5, 6, 7], [0, 0, 1, 2, 3]])  # offset; left-padded
    torch.testing.assert_close(enc(x, positions), x + sinusoidal(positions, 8))


def test_fractional_positions_and_long_sequences():
    enc = posenc.create("sinusoidal", dim=8, layout="concat", base=100.0)
    positions = torch.tensor([0.25, 1.5, 99_999.75], dtype=torch.float64)
    expected = sinusoidal(positions, 8, base=100.0, layout="concat")
    torch.testing.assert_close(enc.encode(positions), expected)
    assert enc(torch.randn(1, 20_000, 8)).shape == (1, 20_000, 8)  # no maximum length


def test_bf16_input_is_the_fp32_sum_rounded_once():
    enc = posenc.create("sinusoidal", dim=64)
    x = torch.randn(2, 300, 64).bfloat16()
    expected = (x.float() + sinusoidal(torch.arange(300), 64)).bfloat16()
    assert torch.equal(enc(x), expected)


def test_config_is_validated():
    with pytest.raises(ValueError, match="dim must be even"):
        posenc.create("sinusoidal", dim=7)
    with pytest.raises(TypeError, match="dim must be an int"):
        posenc.create("sinusoidal", dim=8.0)
    with pytest.raises(ValueError, match="base must be > 0"):
        posenc.create("sinusoidal", dim=8, base=-1.0)
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['theta'\]"):
        posenc.create("sinusoidal", dim=8, theta=10000.0)
    with pytest.raises(ValueError, match=r"missing required config key\(s\) \['dim'\]"):
        posenc.create("sinusoidal")


def test_scaled_sinusoidal_is_sinusoidal_times_a_learned_gain():
    enc = posenc.create("scaled_sinusoidal", dim=16)
    assert enc.scale.requires_grad
    torch.testing.assert_close(enc.scale.detach(), torch.tensor(16**-0.5))
    positions = torch.arange(9)
    torch.testing.assert_close(enc.encode(positions), sinusoidal(positions, 16) * 16**-0.5)
    with torch.no_grad():
        enc.scale.fill_(2.0)
    torch.testing.assert_close(enc.encode(positions), 2 * sinusoidal(positions, 16))
    enc(torch.randn(1, 9, 16)).sum().backward()
    expected_grad = sinusoidal(positions, 16).sum()
    torch.testing.assert_close(enc.scale.grad, expected_grad)
    custom = posenc.create("scaled_sinusoidal", dim=16, init_scale=0.5)
    assert custom.scale.item() == 0.5
