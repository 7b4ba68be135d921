"""Time-series encodings: positions are times, not token indices.

- ``timestamp``: the sinusoidal formula on real-valued times (irregular sampling, any unit).
- ``time2vec``: Kazemi et al. 2019, arXiv:1907.05321, learned frequencies and phases.
- ``calendar``: Informer (Zhou et al. 2021, arXiv:2012.07436), month/day/weekday/hour/
  quarter-hour embeddings of unix timestamps, fixed or learned.

Times must be finite and >= 0 (the check every additive encoding makes): measure them from
an origin at or before the first observation (unix seconds for ``calendar``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..base import AdditiveConfig, AdditiveEncoding
from ..config import check_choice, check_float, check_int
from ..functional.dtypes import wide_dtype
from ..functional.sinusoidal import SINUSOIDAL_LAYOUTS
from ..functional.temporal import (
    CALENDAR_FIELDS,
    CALENDAR_SIZES,
    calendar_fields,
    calendar_sinusoidal,
    time2vec,
    timestamp_encoding,
)
from ..host_reads import read, reads_values
from ..registry import register

__all__ = ["Calendar", "Time2Vec", "Timestamp", "calendar_features"]


@dataclasses.dataclass(frozen=True)
class TimestampConfig(AdditiveConfig):
    """Configuration of :class:`Timestamp`.

    Attributes:
        dim: encoding size (even).
        min_period: the shortest wavelength, in the unit of the times (default 2π, as the
            sinusoidal encoding); keep it at least twice the smallest time step.
        max_period: the longest wavelength, in the unit of the times (default 2π·10⁴: the
            sinusoidal encoding's ``10000`` base, its longest wavelength as ``dim`` grows).
        layout: ``"interleaved"`` (sin on even columns, cos on odd) or ``"concat"`` (all
            sines, then all cosines).
    """

    dim: int
    min_period: float = 2 * math.pi
    max_period: float = 2 * math.pi * 10000.0
    layout: str = "interleaved"

    def __post_init__(self) -> None:
        check_int("dim", self.dim, minimum=2, even=True)
        check_float("min_period", self.min_period)
        check_float("max_period", self.max_period)
        if self.max_period < self.min_period:
            raise ValueError(
                f"max_period must be >= min_period={self.min_period}, got {self.max_period}"
            )
        check_choice("layout", self.layout, SINUSOIDAL_LAYOUTS)


@register(
    "timestamp",
    trainable=False,
    relative=False,
    extrapolates=True,
    reference="Vaswani et al. 2017, Attention Is All You Need, arXiv:1706.03762 (on real times)",
    summary="sin/cos of real-valued times, wavelengths geometric from min_period to max_period",
    formula=(
        "PE[t, 2i] = sin(2π·t/λ_i),  PE[t, 2i+1] = cos(2π·t/λ_i),  t a real time ≥ 0\n"
        "λ_i = min_period·(max_period/min_period)^(i/(d/2 − 1)),  i < d/2, in the unit of t\n"
        "x'_t = x_t + PE[t]"
    ),
)
class Timestamp(AdditiveEncoding):
    """Sinusoidal encoding of real-valued times, for irregularly sampled series::

        PE(t, 2i) = sin(2π t / λ_i),  PE(t, 2i + 1) = cos(2π t / λ_i),
        λ_i = min_period · (max_period / min_period)^(i / (dim/2 - 1))

    With ``min_period = 2π`` and ``max_period = 2π·base^((dim-2)/dim)`` it is the
    ``sinusoidal`` encoding with that ``base``. No parameters, no maximum time; times must
    be finite and >= 0 (shift them to an origin at or before the first one).

    Shapes:
        x: ``[batch, seq, dim]``; positions (times): ``[seq]`` or ``[batch, seq]``, float or
        integer -> ``encode``: ``positions.shape + (dim,)``.
    """

    Config = TimestampConfig
    config: TimestampConfig

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        c = self.config
        return timestamp_encoding(
            positions, c.dim, c.min_period, c.max_period, c.layout, dtype=dtype
        )


@dataclasses.dataclass(frozen=True)
class Time2VecConfig(AdditiveConfig):
    """Configuration of :class:`Time2Vec`.

    Attributes:
        dim: encoding size (the output of the projection).
        k: periodic features (None: ``dim - 1``, so Time2Vec has ``dim`` features before
            the projection).
        init_std: standard deviation of the normal initialisation of ω and φ.
    """

    dim: int
    k: int | None = None
    init_std: float = 1.0

    def __post_init__(self) -> None:
        check_int("dim", self.dim)
        if self.k is not None:
            check_int("k", self.k)
        check_float("init_std", self.init_std)

    @property
    def features(self) -> int:
        """k + 1: the linear feature and the k periodic ones."""
        return (self.dim - 1 if self.k is None else self.k) + 1


@register(
    "time2vec",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference="Kazemi et al. 2019, Time2Vec: Learning a Vector Representation of Time, "
    "arXiv:1907.05321",
    summary="a linear and k sine features of the time with learned frequencies and phases, "
    "projected to dim",
    formula=(
        "t2v(τ)[0] = ω_0·τ + φ_0,  t2v(τ)[i] = sin(ω_i·τ + φ_i) for i = 1..k:  ω, φ learned\n"
        "x'_τ = x_τ + W·t2v(τ):  W a learned d × (k + 1) projection, τ the time"
    ),
)
class Time2Vec(AdditiveEncoding):
    """Time2Vec then a learned linear projection (no bias) to ``dim``::

        t2v(τ)[0] = ω_0 τ + φ_0,   t2v(τ)[i] = sin(ω_i τ + φ_i)  (i = 1..k)
        encode(τ) = W · t2v(τ)

    Parameters: ``omega`` and ``phi`` ``[k + 1]``, ``proj`` ``[dim, k + 1]``. The features
    are computed in float64 (float32 on MPS) so large times keep their phase, then the
    projection runs in float32 (float64 for float64 positions). The linear feature grows
    without bound: normalise times to a few units.

    Shapes:
        positions (times): ``[seq]`` or ``[batch, seq]`` -> ``positions.shape + (dim,)``.
    """

    Config = Time2VecConfig
    config: Time2VecConfig

    def __init__(self, config: Time2VecConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        n, fk = self.config.features, self.factory_kwargs
        self.omega = nn.Parameter(torch.empty(n, **fk))
        self.phi = nn.Parameter(torch.empty(n, **fk))
        self.proj = nn.Parameter(torch.empty(self.config.dim, n, **fk))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.config.init_std
        nn.init.normal_(self.omega, std=std)
        nn.init.normal_(self.phi, std=std)
        bound = self.config.features**-0.5  # nn.Linear's default range
        nn.init.uniform_(self.proj, -bound, bound)

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        wide = wide_dtype(positions.device)
        features = time2vec(positions.to(wide), self.omega.to(wide), self.phi.to(wide))
        return F.linear(features.to(dtype), self.proj.to(dtype))  # [..., k + 1] -> [..., dim]


CALENDAR_MODES = ("fixed", "learned")


@dataclasses.dataclass(frozen=True)
class CalendarConfig(AdditiveConfig):
    """Configuration of :class:`Calendar`.

    Attributes:
        dim: encoding size (even for ``"fixed"``).
        mode: ``"fixed"`` (sinusoidal rows, not trained) or ``"learned"`` (one trainable
            table per field).
        init_std: standard deviation of the learned tables' normal initialisation (unused
            by ``"fixed"``).
    """

    dim: int
    mode: str = "fixed"
    init_std: float = 1.0

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, CALENDAR_MODES)
        check_int("dim", self.dim, minimum=2 if self.mode == "fixed" else 1)
        if self.mode == "fixed" and self.dim % 2:
            raise ValueError(f"dim must be even for mode='fixed' (sin/cos pairs), got {self.dim}")
        check_float("init_std", self.init_std)


@register(
    "calendar",
    trainable=False,
    relative=False,
    extrapolates=True,
    reference="Zhou et al. 2021, Informer, arXiv:2012.07436 (temporal embedding)",
    summary="summed month/day/weekday/hour/quarter-hour embeddings of unix timestamps "
    "(fixed sinusoidal; mode='learned' trains them)",
    formula=(
        "x'_t = x_t + E_mo[month] + E_d[day] + E_wd[weekday] + E_h[hour] + E_m[⌊minute/15⌋]\n"
        'of the UTC date of t (unix seconds);  mode "fixed": E_f[v] = PE[v], the sinusoidal\n'
        'encoding of the value v;  mode "learned": one trained table per field'
    ),
)
class Calendar(AdditiveEncoding):
    """Informer's temporal embedding of UTC unix seconds: the sum of one embedding per
    calendar field (month 13 rows, day 32, weekday 7, hour 24, minute 4 buckets of 15).

    ``mode="fixed"`` (the default, and what :attr:`info` describes) uses row ``v`` of the
    sinusoidal table, computed on the fly; ``mode="learned"`` holds trainable tables
    ``month``, ``day``, ``weekday``, ``hour``, ``minute`` ``[rows, dim]``. Seconds within a
    quarter hour share a vector. Pass integer or float64 seconds: float32 has a spacing of
    128 s near today's timestamps. Times before 1970 (negative) are rejected like any
    negative position; :func:`calendar_features` turns numpy
    ``datetime64`` dates into the fields.

    Shapes:
        positions (unix seconds): ``[seq]`` or ``[batch, seq]`` -> ``positions.shape + (dim,)``.
    """

    Config = CalendarConfig
    config: CalendarConfig

    def __init__(self, config: CalendarConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        if self.config.mode == "learned":
            for name, rows in zip(CALENDAR_FIELDS, CALENDAR_SIZES, strict=True):
                table = torch.empty(rows, self.config.dim, **self.factory_kwargs)
                self.register_parameter(name, nn.Parameter(table))
            self.reset_parameters()

    def reset_parameters(self) -> None:
        for name in CALENDAR_FIELDS if self.config.mode == "learned" else ():
            nn.init.normal_(getattr(self, name), std=self.config.init_std)

    def _encode(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        fields = calendar_fields(positions)  # [..., 5]
        if self.config.mode == "fixed":
            return calendar_sinusoidal(fields, self.config.dim, dtype=dtype)
        out = F.embedding(fields[..., 0], self.get_parameter(CALENDAR_FIELDS[0])).to(dtype)
        for j, name in enumerate(CALENDAR_FIELDS[1:], start=1):
            out = out + F.embedding(fields[..., j], self.get_parameter(name)).to(dtype)
        return out


def calendar_features(times: Any) -> torch.Tensor:
    """The integer calendar fields of dates given as a numpy ``datetime64`` array (naive,
    read as UTC) or as unix seconds (a tensor, array or number, integer or float).

    Float seconds are checked finite with one host read (:mod:`posenc.host_reads`; none with
    ``posenc.validation(False)``), so this conversion of a user's input lives with the
    encoding rather than in :mod:`posenc.functional.temporal`, whose math reads no value.

    Raises:
        ValueError: a NaT date or a non-finite number of seconds.
        TypeError: anything else (booleans, strings, objects).

    Shapes:
        times ``[...]`` -> returns ``[..., 5]`` int64, fields as in :data:`CALENDAR_FIELDS`
    """
    if isinstance(times, (np.ndarray, np.datetime64)) and np.asarray(times).dtype.kind == "M":
        array = np.asarray(times)
        if np.isnat(array).any():
            raise ValueError("times contains NaT (not a time): every date must be valid")
        seconds = torch.from_numpy(array.astype("datetime64[s]").astype(np.int64))
        return calendar_fields(seconds)
    if not isinstance(times, torch.Tensor):
        if isinstance(times, np.ndarray) and times.dtype.kind not in "iuf":
            raise TypeError(f"times must be datetime64 or numeric, got numpy {times.dtype}")
        if times is None or isinstance(times, (str, bytes)):
            raise TypeError(f"times must be datetime64 or numeric, got {type(times).__name__}")
        try:
            times = torch.as_tensor(times)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"times must be datetime64 or numeric, got {type(times).__name__}"
            ) from None
    if times.dtype == torch.bool or times.is_complex():
        raise TypeError(f"times must be datetime64 or numeric, got {times.dtype}")
    if times.is_floating_point() and reads_values(times):
        read(torch.isfinite(times).all().view(1), _check_finite)
    return calendar_fields(times)


def _check_finite(values: list) -> None:
    if not values[0]:
        raise ValueError("times must be finite unix seconds, got NaN or infinite values")
