"""The checks of a public function's arguments, one per kind of value: each raises a
``TypeError`` (a value of the wrong type: a string where a number goes, a bool where an
int goes, a list where a tensor goes) or a ``ValueError`` (a value out of range) whose
message names the parameter and says what was expected. Nothing is clamped or cast.

They read no tensor values (shape, dtype and device facts only; value checks go through
:mod:`posenc.host_reads`), so every layer, the math included, calls them on every call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

__all__ = [
    "MAX_FLOAT",
    "MAX_INT",
    "MAX_POSITION",
    "check_base",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_device",
    "check_devices",
    "check_dtype",
    "check_float",
    "check_generator",
    "check_int",
    "check_ints",
    "check_movable",
    "check_tensor",
]

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


def check_ints(
    name: str, value: Any, *, lengths: Iterable[int], minimum: int = 1, maximum: int = MAX_INT
) -> None:
    """Raise unless ``value`` is a tuple or list of ``lengths`` (one of them) ints, each
    as :func:`check_int` takes it: an ordered sequence (a set has no order, a string is
    not numbers)."""
    lengths = tuple(lengths)
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be a tuple of ints, got {type(value).__name__} ({value!r})")
    if len(value) not in lengths:
        counts = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{name} must hold {counts} ints, got {len(value)}: {value!r}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"{name} must hold ints, got {type(item).__name__} in {value!r}")
        if not minimum <= item <= maximum:
            raise ValueError(f"{name} must hold ints in [{minimum}, {maximum}], got {value!r}")


def check_size(name: str, value: Any, *, minimum: int = 0, maximum: int = MAX_INT) -> None:
    """:func:`check_int` for a length, count or offset that posenc itself may take from a
    tensor's shape (``x.shape[1]``): a ``torch.SymInt``, a symbolic size of a traced shape
    (``torch.export`` with dynamic shapes), is an int by construction and passes unchecked."""
    if type(value) is not int and isinstance(value, torch.SymInt):
        return
    check_int(name, value, minimum=minimum, maximum=maximum)


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


def check_str(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is a ``str`` (a label a message names things by,
    a text to show): any text is valid, a number or None is not."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} ({value!r})")


def check_base(name: str, value: Any) -> None:
    """Raise unless ``value`` is a wavelength base of a rotation: a number as
    :func:`check_float` takes it, and > 1 (wavelengths grow with the pair; at 1 every pair
    turns alike, below it the order is reversed)."""
    check_float(name, value)
    if value <= 1:
        raise ValueError(f"{name} must be > 1 (wavelengths grow with the pair), got {value}")


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


def check_callable(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` can be called."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} ({value!r})")


def check_dtype(name: str, value: Any, *, floating: bool = True) -> None:
    """Raise ``TypeError`` unless ``value`` is a ``torch.dtype`` (a floating one if
    ``floating``): None or a string is never read as a default."""
    if not isinstance(value, torch.dtype) or (floating and not value.is_floating_point):
        kind = "a floating torch.dtype" if floating else "a torch.dtype"
        raise TypeError(f"{name} must be {kind}, got {value!r}")


def check_generator(generator: Any) -> None:
    """Raise ``TypeError`` unless ``generator`` is a ``torch.Generator`` or None."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )


#: how a message names each kind of dtype :func:`check_tensor` takes
_KIND_WORDS = {"float": "floating-point", "int": "integer", "bool": "bool", "complex": "complex"}


def check_tensor(
    name: str,
    value: Any,
    *,
    kinds: Iterable[str] = ("float",),
    dims: Iterable[int] | None = None,
    device: torch.device | None = None,
) -> None:
    """Raise unless ``value`` is a ``torch.Tensor`` whose dtype is of one of ``kinds``
    (``"float"``: floating point, ``"int"``: integer, ``"bool"``) with a number of dimensions
    in ``dims`` (any if None), on ``device`` (if given; a meta tensor beside real ones is
    refused there too).

    Shapes:
        value: any tensor of ``dims`` dimensions.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    kinds = tuple(kinds)
    kind = (
        "bool"
        if value.dtype == torch.bool
        else "float"
        if value.is_floating_point()
        else "complex"
        if value.is_complex()
        else "int"
    )
    if kind not in kinds:
        words = [_KIND_WORDS[k] for k in kinds]
        wanted = " or ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} or {words[-1]}"
        article = "an" if wanted[0] in "aeiou" else "a"
        raise TypeError(f"{name} must be {article} {wanted} tensor, got {value.dtype}")
    if dims is not None and value.dim() not in tuple(dims):
        shapes = " or ".join(f"{n}-D" for n in dims)
        raise ValueError(f"{name} must be {shapes}, got shape {tuple(value.shape)}")
    if device is not None and value.device != device:
        raise ValueError(f"{name} is on {value.device}, the other inputs on {device}")


def check_devices(**tensors: torch.Tensor) -> torch.device:
    """The one device of ``tensors`` (each a tensor, keyed by its parameter's name), or a
    ``ValueError`` naming every one of them with its device (the caller cannot tell which
    is misplaced, so the message names them all). A meta tensor beside real ones is
    refused too: it has no values to compute with.

    Shapes:
        tensors: any.
    """
    first, *others = tensors.values()
    device = first.device
    for tensor in others:  # a plain loop: called on every forward, a generator costs more
        if tensor.device != device:
            names = list(tensors)
            where = ", ".join(f"{name} on {t.device}" for name, t in tensors.items())
            raise ValueError(
                f"{', '.join(names[:-1])} and {names[-1]} must be on one device, got {where}"
            )
    return device


def check_movable(name: str, value: torch.Tensor, device: torch.device) -> None:
    """Raise ``ValueError`` if ``value``, which the caller moves to ``device`` (a table
    made once, used on every device), is on the meta device and ``device`` is not: a meta
    tensor has no values to move.

    Shapes:
        value: any.
    """
    if value.is_meta and device.type != "meta":
        raise ValueError(
            f"{name} is on the meta device (shapes only, no values) but the other inputs on "
            f"{device}: build {name} there"
        )


def check_values(name: str, value: torch.Tensor, reader: str) -> None:
    """Raise ``ValueError`` if ``value`` is on the meta device, which holds no values, where
    ``reader`` (a function whose result depends on the values, not just the shapes) must
    read them: a named refusal rather than torch's error from inside the computation."""
    if value.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device, which holds no values, but {reader} reads them "
            "(its result depends on the values, not only on the shapes)"
        )
