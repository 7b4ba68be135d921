"""Time-series math: timestamp sinusoids, Time2Vec (Kazemi et al. 2019, arXiv:1907.05321) and
calendar fields, against loops and Python's datetime."""

import datetime
import math

import pytest
import torch

from posenc.functional import (
    CALENDAR_FIELDS,
    calendar_fields,
    calendar_sinusoidal,
    sinusoidal,
    time2vec,
    timestamp_encoding,
    timestamp_inv_freq,
)


@pytest.mark.parametrize("dim, low, high", [(8, 1.0, 1000.0), (2, 3.0, 3.0), (16, 60.0, 86400.0)])
def test_inv_freq_spans_the_periods_geometrically(dim, low, high, tol):
    pairs = dim // 2
    expected = [2 * math.pi / (low * (high / low) ** (i / max(pairs - 1, 1))) for i in range(pairs)]
    got = timestamp_inv_freq(dim, low, high)
    torch.testing.assert_close(
        got, torch.tensor(expected, dtype=torch.float64), **tol(torch.float64, n=6, scale=0)
    )


def test_timestamp_encoding_is_sin_cos_of_each_period(tol):
    dim, low, high = 6, 2.0, 500.0
    times = torch.tensor([0.0, 0.5, 3.25, 1234.5], dtype=torch.float64)
    pairs = dim // 2
    expected = torch.empty(4, dim, dtype=torch.float64)
    for s, t in enumerate(times.tolist()):
        for i in range(pairs):
            period = low * (high / low) ** (i / (pairs - 1))
            expected[s, 2 * i] = math.sin(2 * math.pi * t / period)
            expected[s, 2 * i + 1] = math.cos(2 * math.pi * t / period)
    got = timestamp_encoding(times, dim, low, high)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, **tol(torch.float64, n=8, scale=2 * math.pi * 1234.5))


def test_timestamp_encoding_with_sinusoidal_periods_is_sinusoidal(tol):
    dim, base = 8, 10000.0
    high = 2 * math.pi * base ** ((dim - 2) / dim)
    positions = torch.arange(50)
    got = timestamp_encoding(positions, dim, 2 * math.pi, high)
    torch.testing.assert_close(got, sinusoidal(positions, dim, base), **tol(n=2, scale=2 * math.pi))


def test_time2vec_is_eq_1(tol):
    omega, phi = torch.randn(4).double(), torch.randn(4).double()
    times = torch.tensor([0.0, 1.5, -2.0], dtype=torch.float64)
    expected = torch.empty(3, 4, dtype=torch.float64)
    for s, t in enumerate(times.tolist()):
        expected[s, 0] = omega[0].item() * t + phi[0].item()
        for i in range(1, 4):
            expected[s, i] = math.sin(omega[i].item() * t + phi[i].item())
    torch.testing.assert_close(
        time2vec(times, omega, phi), expected, **tol(torch.float64, n=4, scale=10)
    )


DATES = [
    datetime.datetime(1970, 1, 1, 0, 0, 0),
    datetime.datetime(1969, 12, 31, 23, 59, 59),
    datetime.datetime(2000, 2, 29, 12, 14, 59),
    datetime.datetime(2024, 12, 31, 23, 45, 0),
    datetime.datetime(1900, 3, 1, 6, 30, 0),
    datetime.datetime(2100, 2, 28, 18, 15, 1),
    datetime.datetime(1600, 1, 1, 1, 1, 1),
]


def test_calendar_fields_match_datetime():
    epoch = datetime.datetime(1970, 1, 1)
    seconds = torch.tensor([int((d - epoch).total_seconds()) for d in DATES])
    expected = torch.tensor([[d.month, d.day, d.weekday(), d.hour, d.minute // 15] for d in DATES])
    assert torch.equal(calendar_fields(seconds), expected)
    assert torch.equal(calendar_fields(seconds.double() + 0.75), expected)  # floored
    assert calendar_fields(seconds).shape[-1] == len(CALENDAR_FIELDS)


def test_calendar_sinusoidal_sums_the_fields_rows(tol):
    fields = torch.tensor([[3, 14, 2, 9, 1], [12, 31, 6, 23, 3]])
    expected = torch.stack([sinusoidal(row, 8).sum(0) for row in fields])
    # a sum of 5 values in [-1, 1], in any order
    torch.testing.assert_close(calendar_sinusoidal(fields, 8), expected, **tol(n=5, scale=5))


def test_the_math_reads_no_value():
    """Pure math: no host read (the finite check of a user's seconds is
    posenc.additive.temporal.calendar_features')."""
    from tests.test_host_reads import reads

    seconds = torch.tensor([0.0, float("nan"), 1e9])
    assert reads(lambda: calendar_fields(seconds)) == []
    assert reads(lambda: calendar_sinusoidal(calendar_fields(seconds[:1]), 8)) == []
    assert reads(lambda: timestamp_encoding(seconds, 8, 1.0, 100.0)) == []


def test_time2vec_parameters_must_match():
    with pytest.raises(ValueError, match=r"omega and phi must both be \[k \+ 1\]"):
        time2vec(torch.arange(3.0), torch.randn(4), torch.randn(3))
