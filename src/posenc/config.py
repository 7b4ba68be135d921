"""Configuration of an encoding: one frozen dataclass per variant, validated on creation.

Every encoding declares a ``Config`` dataclass. :meth:`EncodingConfig.from_kwargs` turns the
keyword arguments of :func:`posenc.create` into it and rejects unknown keys by name, and each
``__post_init__`` rejects impossible values, so nothing is silently ignored or clamped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

import torch

C = TypeVar("C", bound="EncodingConfig")


@dataclasses.dataclass(frozen=True)
class EncodingConfig:
    """Base of every encoding's configuration. Subclasses add fields and ``__post_init__``."""

    #: the registered name of the encoding, used in error messages
    encoding_name: ClassVar[str] = "encoding"

    @classmethod
    def accepted_keys(cls) -> list[str]:
        """The accepted configuration keys, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def required_keys(cls) -> list[str]:
        missing = dataclasses.MISSING
        return [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is missing and f.default_factory is missing
        ]

    @classmethod
    def from_kwargs(cls: type[C], **kwargs: Any) -> C:
        """Build the config, naming any unknown or missing key and the accepted ones."""
        unknown = sorted(set(kwargs) - set(cls.accepted_keys()))
        if unknown:
            raise ValueError(
                f"unknown config key(s) {unknown} for {cls.encoding_name!r}; "
                f"accepted keys: {cls.accepted_keys()}"
            )
        missing = [k for k in cls.required_keys() if k not in kwargs]
        if missing:
            raise ValueError(
                f"missing required config key(s) {missing} for {cls.encoding_name!r}; "
                f"accepted keys: {cls.accepted_keys()}"
            )
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)


#: the largest int a configuration takes (sizes, lengths, counts, ids): beyond int32,
#: nothing can be allocated or indexed, and past int64 torch cannot even hold the value
MAX_INT = 2**31 - 1
#: the largest magnitude of a configured number (a base, a scale, a period, an init
#: value), and the reciprocal of the smallest nonzero one: far beyond any sensible setting,
#: and near enough to 1 that parameters stay finite in float32 and that products and
#: quotients of such numbers and positions (up to 2**53) stay finite in float64
MAX_FLOAT = 1e15
#: the largest magnitude of a position (:func:`posenc.positions.check_positions`): float64
#: holds every integer up to 2**53, so the angles, distances and table indices computed
#: from positions stay exact and finite
MAX_POSITION = 2**53


def check_int(
    name: str, value: Any, *, minimum: int = 1, even: bool = False, maximum: int = MAX_INT
) -> None:
    """Raise unless ``value`` is an ``int`` (not a bool) in ``[minimum, maximum]`` (and even
    if asked)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    if even and value % 2:
        raise ValueError(f"{name} must be even (sin/cos come in pairs), got {value}")


def check_bool(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is a ``bool``: a truthy string such as
    ``"no"`` never turns a switch on."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")


def check_float(name: str, value: Any, *, positive: bool = True) -> None:
    """Raise unless ``value`` is a real number (> 0 if ``positive``) that is 0 or of a
    magnitude in ``[1 / MAX_FLOAT, MAX_FLOAT]``: finite, and so are the tables computed
    from it and from its reciprocal (periods become frequencies, lengths divisors)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if value != 0 and not 1 / MAX_FLOAT <= abs(value) <= MAX_FLOAT:
        low, high = 1 / MAX_FLOAT, MAX_FLOAT
        bounds = (
            f"in [{low:g}, {high:g}]" if positive else f"0 or of magnitude in [{low:g}, {high:g}]"
        )
        raise ValueError(f"{name} must be {bounds}, got {value}")


def check_choice(name: str, value: Any, choices: Iterable[str]) -> None:
    """Raise unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` (None stays None), or a ``TypeError``/``ValueError``
    naming it."""
    if device is None:
        return None
    if not isinstance(device, (torch.device, str)):
        raise TypeError(f"device must be a torch.device, a str or None, got {device!r}")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must name a torch device, got {device!r}") from None


def check_generator(generator: Any) -> None:
    """Raise ``TypeError`` unless ``generator`` is a ``torch.Generator`` or None."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
