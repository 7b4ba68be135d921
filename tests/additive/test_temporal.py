"""Time-series encodings: timestamp, Time2Vec and calendar, against naive references of
their formulas, the sinusoidal encoding they generalise, and known dates."""

import datetime as dt
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.test_host_reads import reads

import posenc
import posenc.additive.temporal  # registers the encodings
from posenc.additive.temporal import calendar_features
from posenc.functional import sinusoidal
from posenc.functional.temporal import CALENDAR_SIZES, calendar_fields, timestamp_encoding

# timestamp ---------------------------------------------------------------------------------


def timestamp_reference(times, dim, min_period, max_period, layout="interleaved"):
    """A loop over times and pairs: λ_i geometric from min_period to max_period, in float64."""
    pairs = dim // 2
    out = torch.zeros(len(times), dim, dtype=torch.float64)
    for row, t in enumerate(times):
        for i in range(pairs):
            period = min_period * (max_period / min_period) ** (i / max(pairs - 1, 1))
            angle = 2 * math.pi * t / period
            if layout == "interleaved":
                out[row, 2 * i], out[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
            else:
                out[row, i], out[row, pairs + i] = math.sin(angle), math.cos(angle)
    return out


@pytest.mark.parametrize("dim", [2, 8, 64])
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_timestamp_is_sinusoidal_with_matching_periods(dim, layout, base, tol):
    max_period = 2 * math.pi * base ** ((dim - 2) / dim)
    enc = posenc.create(
        "timestamp", dim=dim, min_period=2 * math.pi, max_period=max_period, layout=layout
    )
    positions = torch.arange(0, 3000, 7)
    expected = sinusoidal(positions, dim, base, layout)
    # float64 angles from other float64 frequencies, reduced modulo 2π and rounded to float32
    # (an ulp apart at most, of up to 2π) before sin/cos (an ulp)
    rounding = tol(n=2, scale=2 * math.pi)
    torch.testing.assert_close(enc.encode(positions), expected, **rounding)
    x = torch.randn(2, len(positions), dim)
    torch.testing.assert_close(enc(x, positions), x + expected, **rounding)


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_timestamp_irregular_times_match_the_formula(layout, tol):
    times = [0.0, 0.013, 0.5, 1.25, 3.0001, 17.9, 250.75, 86400.5]
    enc = posenc.create("timestamp", dim=12, min_period=0.1, max_period=1e5, layout=layout)
    expected = timestamp_reference(times, 12, 0.1, 1e5, layout)
    got = enc.encode(torch.tensor(times, dtype=torch.float64))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-9)
    times32 = torch.tensor(times)  # the float32 times are their rounded values, exactly
    expected32 = timestamp_reference(times32.tolist(), 12, 0.1, 1e5, layout).float()
    # float64 angles reduced modulo 2π, rounded to float32 (eps/2 of 2π), then sin/cos
    torch.testing.assert_close(enc.encode(times32), expected32, **tol(n=2, scale=2 * math.pi))
    # the same time gives the same vector whatever its neighbours and batch row: the same
    # angle, but sin/cos in another place of the vectorised loop (an ulp apart at most)
    batched = torch.tensor([[0.5, 3.0001], [17.9, 0.5]], dtype=torch.float64)
    out = enc.encode(batched)
    torch.testing.assert_close(out[0, 0], out[1, 1], **tol(torch.float64, n=2, scale=1))


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=5))
def test_timestamp_values_bounded_and_pairs_on_the_circle(times):
    pe = timestamp_encoding(torch.tensor(times, dtype=torch.float64), 8, 0.5, 1e4)
    assert pe.abs().max() <= 1
    pairs = pe.view(len(times), 4, 2)
    torch.testing.assert_close(pairs.pow(2).sum(-1), torch.ones(len(times), 4, dtype=torch.float64))


def test_timestamp_rejects_negative_times_and_bad_config():
    enc = posenc.create("timestamp", dim=8)
    with pytest.raises(ValueError, match=r"must be >= 0, got -0.5"):
        enc.encode(torch.tensor([1.0, -0.5]))
    with pytest.raises(ValueError, match="must be finite"):
        enc.encode(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="max_period must be >= min_period"):
        posenc.create("timestamp", dim=8, min_period=10.0, max_period=1.0)
    with pytest.raises(ValueError, match="min_period must be > 0"):
        posenc.create("timestamp", dim=8, min_period=0.0)
    with pytest.raises(ValueError, match="dim must be even"):
        posenc.create("timestamp", dim=7)
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['base'\]"):
        posenc.create("timestamp", dim=8, base=10.0)


# time2vec ----------------------------------------------------------------------------------


def time2vec_reference(times, omega, phi, proj):
    """Kazemi et al. 2019 eq. 1, one time and one feature at a time, then W · t2v(τ)."""
    out = []
    for tau in times:
        feats = [omega[0] * tau + phi[0]]
        feats += [math.sin(omega[i] * tau + phi[i]) for i in range(1, len(omega))]
        out.append(
            [sum(proj[r][i] * feats[i] for i in range(len(feats))) for r in range(len(proj))]
        )
    return torch.tensor(out, dtype=torch.float64)


def test_time2vec_matches_the_paper_formula():
    enc = posenc.create("time2vec", dim=6, k=4).double()
    assert enc.omega.shape == enc.phi.shape == (5,) and enc.proj.shape == (6, 5)
    times = [0.0, 0.25, 1.0, 2.5, 10.125, 99.0]
    expected = time2vec_reference(times, enc.omega.tolist(), enc.phi.tolist(), enc.proj.tolist())
    got = enc.encode(torch.tensor(times, dtype=torch.float64))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert posenc.create("time2vec", dim=16).omega.shape == (16,)  # default k = dim - 1


def test_time2vec_gradients_reach_omega_and_phi():
    enc = posenc.create("time2vec", dim=8, k=3)
    x = torch.randn(2, 5, 8)
    times = torch.tensor([0.0, 0.3, 1.7, 2.0, 4.5])
    (enc(x, times) * torch.randn(2, 5, 8)).sum().backward()
    for name in ("omega", "phi", "proj"):
        grad = getattr(enc, name).grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().min() > 0, name
    # d encode / d phi_0 is W[:, 0] at every time
    enc.zero_grad()
    enc.encode(times).sum().backward()
    torch.testing.assert_close(enc.phi.grad[0], enc.proj[:, 0].sum().detach() * len(times))


def test_time2vec_config_is_validated():
    with pytest.raises(ValueError, match="k must be >= 1"):
        posenc.create("time2vec", dim=8, k=0)
    with pytest.raises(TypeError, match="k must be an int"):
        posenc.create("time2vec", dim=8, k=2.0)


# calendar ----------------------------------------------------------------------------------


def unix(*args):
    return int(dt.datetime(*args, tzinfo=dt.timezone.utc).timestamp())


def fields_reference(seconds):
    """(month, day, weekday, hour, minute bucket) from Python's datetime."""
    d = dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
    return [d.month, d.day, d.weekday(), d.hour, d.minute // 15]


def test_calendar_fields_of_known_dates():
    leap = unix(2024, 2, 29, 13, 47)
    assert calendar_features(leap).tolist() == [2, 29, 3, 13, 3]  # a Thursday, 13:45-14:00
    assert calendar_features(0).tolist() == [1, 1, 3, 0, 0]  # 1970-01-01, a Thursday
    assert calendar_features(unix(2000, 3, 1)).tolist() == [3, 1, 2, 0, 0]  # a Wednesday
    assert calendar_features(unix(2100, 12, 31, 23, 59, 59)).tolist() == [12, 31, 4, 23, 3]
    assert calendar_features(float(leap) + 0.999).tolist() == [2, 29, 3, 13, 3]
    dates = np.array(["2024-02-29T13:47", "1969-12-31T23:59:59"], dtype="datetime64[s]")
    assert calendar_features(dates).tolist() == [[2, 29, 3, 13, 3], [12, 31, 2, 23, 3]]
    assert calendar_features(np.datetime64("2024-02-29T13:47:30.5")).tolist() == [2, 29, 3, 13, 3]
    batch = calendar_features(torch.tensor([[leap, 0]]))
    assert batch.shape == (1, 2, 5) and batch.dtype == torch.int64


@given(st.lists(st.integers(-(2**34), 2**34), min_size=1, max_size=20))
def test_calendar_fields_match_datetime(seconds):
    seconds = [s for s in seconds if -62135596800 <= s < 253402300800]  # years 1..9999
    got = calendar_features(torch.tensor(seconds, dtype=torch.int64)).tolist()
    assert got == [fields_reference(s) for s in seconds]
    ranges = torch.tensor(CALENDAR_SIZES)
    assert all((torch.tensor(row) < ranges).all() for row in got)


def test_calendar_invalid_dates_raise():
    with pytest.raises(ValueError, match="NaT"):
        calendar_features(np.array(["2024-01-01", "NaT"], dtype="datetime64[m]"))
    with pytest.raises(ValueError, match="finite"):
        calendar_features(torch.tensor([0.0, float("inf")]))
    with pytest.raises(ValueError, match="finite"):
        calendar_features(np.array([float("nan")]))
    with pytest.raises(TypeError):
        calendar_features(np.array(["2024-01-01"]))
    enc = posenc.create("calendar", dim=8)
    with pytest.raises(ValueError, match="finite"):
        enc.encode(torch.tensor([0.0, float("nan")], dtype=torch.float64))
    with pytest.raises(ValueError, match="must be >= 0"):
        enc.encode(torch.tensor([-60]))


def informer_fixed_table(rows, dim):
    """Informer's FixedEmbedding weight, as its code builds it."""
    w = torch.zeros(rows, dim, dtype=torch.float64)
    for pos in range(rows):
        for i in range(0, dim, 2):
            w[pos, i] = math.sin(pos * math.exp(i * -(math.log(10000.0) / dim)))
            w[pos, i + 1] = math.cos(pos * math.exp(i * -(math.log(10000.0) / dim)))
    return w


def test_calendar_fixed_is_the_sum_of_informer_tables():
    enc = posenc.create("calendar", dim=16)
    assert not list(enc.parameters()) and enc.state_dict() == {}
    times = [unix(2024, 2, 29, 13, 47), unix(2023, 7, 4, 0, 5), unix(1999, 12, 31, 23, 59)]
    tables = [informer_fixed_table(rows, 16) for rows in CALENDAR_SIZES]
    expected = torch.stack(
        [sum(t[v] for t, v in zip(tables, fields_reference(s), strict=True)) for s in times]
    )
    got = enc.encode(torch.tensor(times, dtype=torch.float64))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", ["fixed", "learned"])
def test_calendar_same_timestamp_same_vector(mode):
    enc = posenc.create("calendar", dim=8, mode=mode)
    t = unix(2024, 2, 29, 13, 47)
    positions = torch.tensor([[t, t + 60, t - 3600], [t - 86400 * 7, t, t + 3 * 60]])
    pe = enc.encode(positions)
    # the same fields: the same table rows added in the same order
    torch.testing.assert_close(pe[0, 0], pe[1, 1], rtol=0, atol=0)
    torch.testing.assert_close(pe[0, 0], pe[0, 1], rtol=0, atol=0)  # same quarter hour
    assert not torch.equal(pe[0, 0], pe[0, 2])  # an hour earlier
    assert not torch.equal(pe[0, 0], pe[1, 0])  # a week earlier: same weekday, other day
    torch.testing.assert_close(enc.encode(torch.tensor([t])), pe[0, :1], rtol=0, atol=0)
    torch.testing.assert_close(
        enc.encode(torch.tensor([t + 0.5], dtype=torch.float64)),
        enc.encode(torch.tensor([t]), dtype=torch.float64),
        rtol=0,
        atol=0,
    )


def test_calendar_learned_tables_are_looked_up_and_trained():
    enc = posenc.create("calendar", dim=6, mode="learned")
    names = ["month", "day", "weekday", "hour", "minute"]
    assert [n for n, _ in enc.named_parameters()] == names
    assert [tuple(getattr(enc, n).shape) for n in names] == [(r, 6) for r in CALENDAR_SIZES]
    t = unix(2024, 2, 29, 13, 47)
    expected = sum(getattr(enc, n)[v] for n, v in zip(names, [2, 29, 3, 13, 3], strict=True))
    torch.testing.assert_close(enc.encode(torch.tensor([t]))[0], expected)
    enc(torch.randn(1, 1, 6), torch.tensor([t])).sum().backward()
    for n, v in zip(names, [2, 29, 3, 13, 3], strict=True):
        grad = getattr(enc, n).grad
        assert grad[v].abs().sum() > 0 and grad.abs().sum() == grad[v].abs().sum()
    assert posenc.create("calendar", dim=5, mode="learned").dim == 5  # any dim when learned
    with pytest.raises(ValueError, match="dim must be even for mode='fixed'"):
        posenc.create("calendar", dim=5)
    with pytest.raises(ValueError, match="mode must be one of"):
        posenc.create("calendar", dim=8, mode="trained")


def test_calendar_features_read_datetime64_and_reject_nat():
    dates = [dt.datetime(1969, 12, 31, 23, 59, 59), dt.datetime(2000, 2, 29, 12, 14, 59)]
    array = np.array([np.datetime64(d) for d in dates], dtype="datetime64[s]")
    epoch = dt.datetime(1970, 1, 1)
    seconds = torch.tensor([int((d - epoch).total_seconds()) for d in dates])
    assert torch.equal(calendar_features(array), calendar_fields(seconds))
    with pytest.raises(ValueError, match="NaT"):
        calendar_features(np.array(["NaT"], dtype="datetime64[s]"))
    with pytest.raises(ValueError, match="finite"):
        calendar_features(torch.tensor([float("nan")]))
    with pytest.raises(TypeError, match="numeric"):
        calendar_features(torch.tensor([True]))


def test_calendar_features_finite_check_follows_validation():
    """The finiteness check reads the values through posenc.host_reads (one read): off with
    validation, and skipped for the meta device (no values)."""
    assert len(reads(lambda: calendar_features(torch.tensor([0.0, 1e9])))) == 1
    assert reads(lambda: calendar_features(torch.tensor([0, 10**9]))) == []  # integers
    with posenc.validation(False):
        assert calendar_features(torch.tensor([0.0, float("nan")])).shape == (2, 5)
    assert calendar_features(torch.zeros(3, device="meta")).is_meta
    with pytest.raises(TypeError, match="times must be datetime64 or numeric, got str"):
        calendar_features("2024-01-01")
