"""The math of time-series encodings: real-valued timestamps, Time2Vec and calendar fields.

- timestamp: the sinusoidal formula (Vaswani et al. 2017, arXiv:1706.03762 §3.5) on real
  times, with wavelengths chosen in the time's own unit.
- Time2Vec (Kazemi et al. 2019, arXiv:1907.05321): one linear and k periodic features of
  the time with learned frequencies and phases.
- calendar fields (Informer, Zhou et al. 2021, arXiv:2012.07436): month, day, weekday, hour
  and quarter-hour of a UTC timestamp, as integers for embedding tables.

Pure math: shapes, dtypes and devices are checked, no tensor value is read on the host.
Turning a user's dates (numpy ``datetime64``, numbers) into checked unix seconds is the
calendar encoding's (:func:`posenc.additive.temporal.calendar_features`).
"""

from __future__ import annotations

import math

import torch

from ..arguments import (
    check_choice,
    check_device,
    check_devices,
    check_dtype,
    check_float,
    check_int,
    check_tensor,
)
from .sinusoidal import SINUSOIDAL_LAYOUTS, sin_cos_encoding, sinusoidal

__all__ = [
    "CALENDAR_FIELDS",
    "CALENDAR_SIZES",
    "calendar_fields",
    "calendar_sinusoidal",
    "time2vec",
    "timestamp_encoding",
    "timestamp_inv_freq",
]

#: the calendar fields, in the column order of Informer's time marks (``x_mark``)
CALENDAR_FIELDS = ("month", "day", "weekday", "hour", "minute")
#: rows of each field's table: month 1..12, day 1..31, weekday 0..6 (Monday = 0),
#: hour 0..23, minute bucket 0..3 (quarters of an hour)
CALENDAR_SIZES = (13, 32, 7, 24, 4)


def timestamp_inv_freq(
    dim: int,
    min_period: float,
    max_period: float,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Angular frequencies ω_i = 2π / λ_i of wavelengths geometric from ``min_period`` to
    ``max_period`` over the ``dim / 2`` pairs::

        λ_i = min_period · (max_period / min_period)^(i / (dim/2 - 1)),  i = 0 .. dim/2 - 1

    (one pair: λ_0 = min_period). With ``min_period = 2π`` and ``max_period =
    2π·base^((dim-2)/dim)`` this is :func:`~posenc.functional.sinusoidal_inv_freq`,
    ω_i = base^(-2i/dim).

    Shapes:
        returns ``[dim // 2]``
    """
    check_int("dim", dim, minimum=2, even=True)
    _check_periods(min_period, max_period)
    device = check_device(device)
    check_dtype("dtype", dtype)
    pairs = dim // 2
    steps = torch.arange(pairs, device=device, dtype=torch.float64) / max(pairs - 1, 1)
    ratio = math.log(max_period / min_period)
    periods = min_period * torch.exp(steps * ratio)  # [dim/2]
    return (2 * math.pi / periods).to(dtype)


def _check_periods(min_period: float, max_period: float) -> None:
    check_float("min_period", min_period)
    check_float("max_period", max_period)
    if min_period > max_period:
        raise ValueError(
            f"need 0 < min_period <= max_period, got min_period={min_period}, "
            f"max_period={max_period}"
        )


def timestamp_encoding(
    times: torch.Tensor,
    dim: int,
    min_period: float = 2 * math.pi,
    max_period: float = 2 * math.pi * 10000.0,
    layout: str = "interleaved",
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The sinusoidal encoding of real-valued times (irregular sampling, any unit)::

        PE(t, 2i)     = sin(2π t / λ_i)
        PE(t, 2i + 1) = cos(2π t / λ_i)
        λ_i = min_period · (max_period / min_period)^(i / (dim/2 - 1))

    With ``min_period = 2π`` and ``max_period = 2π·base^((dim-2)/dim)`` it is
    :func:`~posenc.functional.sinusoidal` with that ``base`` (Vaswani et al. 2017,
    arXiv:1706.03762 §3.5). Keep ``min_period`` at least twice the smallest time step: a
    shorter wavelength aliases (λ = 1 is constant on integer times). Angles are formed in
    float64 and reduced modulo 2π, as for sinusoidal and RoPE.

    Args:
        times: any shape, integer or float, in the unit of the periods.
        dim: the encoding size (even).
        min_period, max_period: the shortest and longest wavelength, in time units.
        layout: ``"interleaved"`` or ``"concat"`` (see :data:`SINUSOIDAL_LAYOUTS`).
        dtype: the result dtype; default float32, float64 for float64 times.

    Shapes:
        times: ``[...]`` -> returns ``[..., dim]``
    """
    check_tensor("times", times, kinds=("int", "float"))
    check_choice("layout", layout, SINUSOIDAL_LAYOUTS)
    inv_freq = timestamp_inv_freq(dim, min_period, max_period, device=times.device)
    return sin_cos_encoding(times, inv_freq, layout, dtype=dtype)


def time2vec(times: torch.Tensor, omega: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """Time2Vec (Kazemi et al. 2019, arXiv:1907.05321, eq. 1)::

        t2v(τ)[0] = ω_0 τ + φ_0
        t2v(τ)[i] = sin(ω_i τ + φ_i),  i = 1 .. k

    Computed in the dtype of ``omega`` (cast times, omega and phi to one dtype first).

    Shapes:
        times ``[...]``, omega and phi ``[k + 1]`` -> returns ``[..., k + 1]``
    """
    check_tensor("times", times, kinds=("int", "float"))
    check_tensor("omega", omega, dims=(1,))
    check_tensor("phi", phi, dims=(1,))
    if omega.shape != phi.shape:
        raise ValueError(
            f"omega and phi must both be [k + 1], got {tuple(omega.shape)} and {tuple(phi.shape)}"
        )
    check_devices(times=times, omega=omega, phi=phi)
    angles = times.unsqueeze(-1) * omega + phi  # [..., k + 1]
    return torch.cat((angles[..., :1], angles[..., 1:].sin()), dim=-1)


def calendar_fields(seconds: torch.Tensor) -> torch.Tensor:
    """Calendar fields of unix times (seconds since 1970-01-01 00:00 UTC, proleptic
    Gregorian calendar, no leap seconds), in the order of :data:`CALENDAR_FIELDS`: month
    1..12, day 1..31, weekday 0..6 (Monday = 0, as pandas ``dayofweek``), hour 0..23,
    minute bucket 0..3 (``minute // 15``). Fractional seconds are floored; times before
    1970 work too. No value check (see :func:`calendar_features`), so it traces under
    ``torch.compile``. The date uses Hinnant's ``civil_from_days``, in integer ops.

    Shapes:
        seconds ``[...]`` (integer or float) -> returns ``[..., 5]`` int64
    """
    check_tensor("seconds", seconds, kinds=("int", "float"))
    if seconds.is_floating_point():
        seconds = torch.floor(seconds.to(torch.float64)).to(torch.int64)
    else:
        seconds = seconds.to(torch.int64)
    days = torch.div(seconds, 86400, rounding_mode="floor")
    in_day = seconds - days * 86400
    hour = torch.div(in_day, 3600, rounding_mode="floor")
    minute = torch.div(in_day - hour * 3600, 60 * 15, rounding_mode="floor")
    weekday = torch.remainder(days + 3, 7)  # 1970-01-01 was a Thursday
    z = days + 719468  # days since 0000-03-01
    era = torch.div(z, 146097, rounding_mode="floor")
    doe = z - era * 146097  # day of the 400-year era, 0..146096
    yoe = torch.div(
        doe
        - torch.div(doe, 1460, rounding_mode="floor")
        + torch.div(doe, 36524, rounding_mode="floor")
        - torch.div(doe, 146096, rounding_mode="floor"),
        365,
        rounding_mode="floor",
    )
    doy = doe - (
        365 * yoe
        + torch.div(yoe, 4, rounding_mode="floor")
        - torch.div(yoe, 100, rounding_mode="floor")
    )
    mp = torch.div(5 * doy + 2, 153, rounding_mode="floor")  # month from March = 0
    day = doy - torch.div(153 * mp + 2, 5, rounding_mode="floor") + 1
    month = torch.where(mp < 10, mp + 3, mp - 9)
    return torch.stack((month, day, weekday, hour, minute), dim=-1)


def calendar_sinusoidal(
    fields: torch.Tensor, dim: int, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Informer's fixed temporal embedding: the sum over the fields of the sinusoidal
    encoding of each field's value (row ``value`` of Informer's ``FixedEmbedding`` table,
    which is :func:`sinusoidal` of ``arange(rows)``), so no table is stored.

    Shapes:
        fields ``[..., n_fields]`` integers -> returns ``[..., dim]``
    """
    check_tensor("fields", fields, kinds=("int",))
    if fields.dim() == 0:
        raise ValueError("fields must be [..., n_fields] (one value per calendar field), got 0-D")
    check_dtype("dtype", dtype)
    return sinusoidal(fields, dim, dtype=dtype).sum(dim=-2)  # [..., n_fields, dim] -> [..., dim]
