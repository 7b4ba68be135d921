"""The learned table: lookup, its hard limit, and resize."""

import pytest
import torch

import posenc
from posenc.functional import sinusoidal


def test_encode_is_a_row_lookup():
    enc = posenc.create("learned", dim=8, max_positions=16)
    positions = torch.tensor([[0, 5, 15], [2, 2, 3]])
    assert torch.equal(enc.encode(positions), enc.weight.detach()[positions])
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(enc(x, positions), x + enc.weight.detach()[positions])
    torch.testing.assert_close(enc(x), x + enc.weight.detach()[:3])


def test_default_limit_is_2048_and_2049_tokens_fail_clearly():
    """The article: trained with 2048 learned positions, a 2049-token input cannot be read."""
    enc = posenc.create("learned", dim=4)
    assert enc.config.max_positions == 2048
    enc(torch.randn(1, 2048, 4))  # fits exactly
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions=2048") as err:
        enc(torch.randn(1, 2049, 4))
    assert isinstance(err.value, ValueError)
    assert err.value.position == 2048 and err.value.limit == 2048
    assert "position 2048" in str(err.value)


def test_explicit_positions_past_the_table_fail_clearly():
    enc = posenc.create("learned", dim=4, max_positions=10)
    with pytest.raises(posenc.PositionOutOfRangeError, match=r"position 12 .*max_positions=10"):
        enc.encode(torch.tensor([3, 12, 4]))
    with pytest.raises(ValueError, match="must be >= 0"):
        enc.encode(torch.tensor([-1]))
    with pytest.raises(TypeError, match="integer tensor"):
        enc.encode(torch.tensor([1.5]))


def test_resize_interpolate_stretches_the_learned_rows():
    enc = posenc.create("learned", dim=3, max_positions=3)
    with torch.no_grad():
        enc.weight.copy_(torch.tensor([[0.0, 1, 2], [2, 3, 4], [4, 5, 6]]))
    assert enc.resize(5) is enc
    assert enc.config.max_positions == 5 and enc.weight.shape == (5, 3)
    expected = torch.tensor([[0.0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6]])
    torch.testing.assert_close(enc.weight.detach(), expected)
    assert enc.weight.requires_grad
    enc(torch.randn(1, 5, 3))  # now fits


def test_resize_extend_keeps_rows_and_adds_sinusoidal_ones():
    enc = posenc.create("learned", dim=8, max_positions=4)
    old = enc.weight.detach().clone()
    enc.resize(10, mode="extend")
    assert torch.equal(enc.weight.detach()[:4], old)
    torch.testing.assert_close(enc.weight.detach()[4:], sinusoidal(torch.arange(4, 10), 8))
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions=10"):
        enc.encode(torch.tensor([10]))


def test_resize_rejects_bad_arguments():
    enc = posenc.create("learned", dim=4, max_positions=8)
    with pytest.raises(ValueError, match="must exceed max_positions=8"):
        enc.resize(8)
    with pytest.raises(ValueError, match="mode must be one of"):
        enc.resize(16, mode="nearest")
    with pytest.raises(TypeError, match="new_max_positions must be an int"):
        enc.resize(16.0)


def test_resize_keeps_dtype_and_device():
    enc = posenc.create("learned", dim=4, max_positions=8, dtype=torch.bfloat16)
    enc.resize(12)
    assert enc.weight.dtype == torch.bfloat16
