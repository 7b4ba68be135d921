"""The registry: encoding name -> class and its :class:`EncodingInfo`.

``create``, ``available`` and ``info`` are the public entry points; an encoding joins the
registry with the :func:`register` class decorator and is then covered by the conformance suite.
At run time it imports only :mod:`posenc.info` of the package (:mod:`posenc.base` takes
:class:`EncodingInfo` from there too); :func:`posenc.build` builds for a model's sizes on top.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .encoding_info import EncodingInfo

if TYPE_CHECKING:
    from .base import Encoding

E = TypeVar("E", bound="type[Encoding]")

__all__ = ["EncodingInfo", "available", "create", "get", "info", "register"]


_REGISTRY: dict[str, type[Encoding]] = {}


def register(
    name: str,
    *,
    trainable: bool,
    relative: bool,
    extrapolates: bool,
    reference: str,
    summary: str,
    formula: str,
) -> Callable[[E], E]:
    """Class decorator that registers an :class:`~posenc.base.Encoding` subclass under ``name``.

    The class must define its own ``Config`` dataclass; its ``kind`` comes from its base class.
    ``formula`` is its math in plain Unicode text (no LaTeX), one to four lines, with the
    symbols explained (:attr:`EncodingInfo.formula`). ``extrapolates`` says that it is
    defined past the training length, not that it works there
    (:attr:`EncodingInfo.extrapolates`).
    """
    if not isinstance(formula, str) or not formula.strip():
        raise ValueError(f"formula must be a non-empty str (the math of {name!r}), got {formula!r}")
    lines = formula.strip().split("\n")
    if len(lines) > 4:
        raise ValueError(f"formula must be one to four lines, got {len(lines)} for {name!r}")

    def decorate(cls: E) -> E:
        if name in _REGISTRY:
            raise ValueError(f"an encoding named {name!r} is already registered")
        if "Config" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} must define its own Config dataclass")
        cls.Config.encoding_name = name
        cls.info = EncodingInfo(
            name=name,
            kind=cls.kind,
            trainable=trainable,
            relative=relative,
            extrapolates=extrapolates,
            reference=reference,
            summary=summary,
            formula=formula.strip(),
        )
        _REGISTRY[name] = cls
        return cls

    return decorate


def available() -> list[str]:
    """Every registered encoding name, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> type[Encoding]:
    """The class registered under ``name``; a ``ValueError`` lists the known names otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"an encoding name must be a str, got {type(name).__name__}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown encoding {name!r}; available: {available()} (name must be one of them)"
        ) from None


def info(name: str) -> EncodingInfo:
    """The :class:`EncodingInfo` of the encoding registered under ``name``."""
    return get(name).info


def create(name: str, **config: Any) -> Encoding:
    """Build the encoding registered under ``name`` from its configuration keys.

    ``device`` and ``dtype`` are passed to the module's parameters; every other key must be a
    field of the encoding's ``Config``: an unknown or invalid key raises ``ValueError`` (a
    value of the wrong type, ``TypeError``), naming the key.

    The return type is the base :class:`~posenc.base.Encoding`, since the class behind a
    name is known only at run time: narrow it before calling a kind's methods
    (``assert isinstance(enc, posenc.AdditiveEncoding)``, then ``enc.encode(...)``), or
    build the class itself (``posenc.additive.Sinusoidal(dim=64)``) for its exact type.

    Example:
        >>> enc = create("sinusoidal", dim=64)
        >>> enc.kind
        'additive'
    """
    return get(name)(**config)
