"""The working-dtype rules: float32 unless an input is float64; float64 angles except on MPS."""

import pytest
import torch

from posenc.functional import math_dtype, wide_dtype

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("dtypes", [(a, b) for a in FLOATS for b in FLOATS] + [(torch.long,)])
def test_math_dtype_is_float64_only_when_an_input_is(dtypes):
    expected = torch.float64 if torch.float64 in dtypes else torch.float32
    assert math_dtype(*dtypes) is expected


def test_math_dtype_of_nothing_is_float32():
    assert math_dtype() is torch.float32


@pytest.mark.parametrize(
    "device, expected",
    [
        (None, torch.float64),
        ("cpu", torch.float64),
        (torch.device("cpu"), torch.float64),
        ("meta", torch.float64),
        ("mps", torch.float32),
        (torch.device("mps"), torch.float32),
    ],
)
def test_wide_dtype(device, expected):
    assert wide_dtype(device) is expected


def test_helpers_trace_under_compile():
    def f(x):
        return x.to(wide_dtype(x.device)).to(math_dtype(x.dtype))

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    x = torch.arange(3.0)
    assert torch.equal(compiled(x), f(x)) and compiled(x).dtype is torch.float32
