"""query_temperature: Llama 4's query scale against transformers' expression, its steps,
shapes and errors."""

import pytest
import torch

from posenc.attn.temperature import QueryTemperature, query_temperature


def hf_scales(positions, floor_scale, attn_scale):
    """``Llama4TextAttention``'s expression (transformers 5.24), on its float32 positions."""
    return torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0


@pytest.mark.parametrize(("floor_scale", "attn_scale"), [(8192, 0.1), (3, 0.5), (1000, 2.0)])
def test_equals_llama4s_expression(floor_scale, attn_scale):
    positions = torch.cat((torch.arange(20_000), torch.randint(0, 2**24 - 1, (5000,))))
    got = query_temperature(positions, floor_scale, attn_scale)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, hf_scales(positions, floor_scale, attn_scale), rtol=0, atol=0)


def test_steps_at_every_multiple_of_floor_scale():
    """1 below ``floor_scale - 1``; ``log(n + 1) * attn_scale + 1`` from ``n * floor_scale - 1``."""
    p = torch.tensor([0, 8190, 8191, 16382, 16383, 10 * 8192 - 1])
    want = torch.tensor([0.0, 0.0, 1.0, 1.0, 2.0, 10.0]).log1p() * 0.1 + 1
    torch.testing.assert_close(query_temperature(p), want, rtol=0, atol=0)
    # past float32's integers: the floor exact in float64, then the log in float32
    big = torch.tensor([3 * 2**30 + 2], dtype=torch.int64)
    steps = torch.tensor([2.0**30 + 1], dtype=torch.float64)
    want = (steps.log1p() * 0.1 + 1).float()
    torch.testing.assert_close(query_temperature(big, 3), want, rtol=0, atol=0)


def test_keeps_the_shape_and_takes_float_positions():
    p = torch.randint(0, 50, (3, 7))
    got = query_temperature(p, 4, 0.2)
    assert got.shape == (3, 7)
    torch.testing.assert_close(got, query_temperature(p.flatten(), 4, 0.2).view(3, 7))
    torch.testing.assert_close(query_temperature(p.double(), 4, 0.2), got)
    assert torch.equal(QueryTemperature(4, 0.2)(p), got)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: query_temperature(torch.arange(3), 0), ValueError, "floor_scale must be >= 1"),
        (lambda: query_temperature(torch.arange(3), 2.5), TypeError, "floor_scale must be an int"),
        (lambda: query_temperature(torch.arange(3), 8, -1.0), ValueError, "attn_scale must be > 0"),
        (lambda: query_temperature(torch.tensor([-1]), 8), ValueError, "positions must be >= 0"),
        (lambda: query_temperature(torch.ones(2).bool()), TypeError, "positions must be"),
        (lambda: query_temperature(torch.ones(1, 2, 3)), ValueError, "positions must be"),
        (lambda: QueryTemperature(attn_scale=0.0), ValueError, "attn_scale must be > 0"),
        (lambda: QueryTemperature(floor_scale=True), TypeError, "floor_scale must be an int"),
    ],
)
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
