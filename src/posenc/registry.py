"""The registry: encoding name -> class and its :class:`EncodingInfo`.

``create``, ``available`` and ``info`` are the public entry points; an encoding joins the
registry with the :func:`register` class decorator and is then covered by the conformance suite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .base import Encoding

E = TypeVar("E", bound="type[Encoding]")

__all__ = ["EncodingInfo", "available", "create", "info", "register", "resolve"]


@dataclasses.dataclass(frozen=True)
class EncodingInfo:
    """What a person choosing an encoding needs to know about it.

    Attributes:
        name: the registered name, as passed to :func:`posenc.create`.
        kind: ``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``: where position enters.
        trainable: whether the encoding has learned parameters.
        relative: whether attention scores depend only on distances, not absolute positions.
        extrapolates: whether it is defined past the training length without a hard limit.
        reference: the paper (authors, year, arXiv id).
        summary: one line on what it does.
    """

    name: str
    kind: str
    trainable: bool
    relative: bool
    extrapolates: bool
    reference: str
    summary: str


_REGISTRY: dict[str, type[Encoding]] = {}


def register(
    name: str, *, trainable: bool, relative: bool, extrapolates: bool, reference: str, summary: str
) -> Callable[[E], E]:
    """Class decorator that registers an :class:`~posenc.base.Encoding` subclass under ``name``.

    The class must define its own ``Config`` dataclass; its ``kind`` comes from its base class.
    """

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
        raise ValueError(f"unknown encoding {name!r}; available: {available()}") from None


def info(name: str) -> EncodingInfo:
    """The :class:`EncodingInfo` of the encoding registered under ``name``."""
    return get(name).info


def create(name: str, **config: Any) -> Encoding:
    """Build the encoding registered under ``name`` from its configuration keys.

    ``device`` and ``dtype`` are passed to the module's parameters; every other key must be a
    field of the encoding's ``Config``: an unknown or invalid key raises ``ValueError`` (a
    value of the wrong type, ``TypeError``), naming the key.

    Example:
        >>> enc = create("sinusoidal", dim=64)
        >>> enc.kind
        'additive'
    """
    return get(name)(**config)


def _sizes_wanted(cls: type[Encoding], sizes: Mapping[str, Any]) -> list[str]:
    """The sizes a model fills in: the kind's size key, and any other size the encoding
    requires (Shaw's ``head_dim``)."""
    wanted = {cls.size_key} | (set(cls.Config.required_keys()) & set(sizes))
    return sorted(k for k in wanted if k is not None and k in sizes)


def resolve(spec: str | Mapping[str, Any] | Encoding, **sizes: Any) -> Encoding:
    """Turn an encoding given by name, by dict or as an instance into an instance.

    ``sizes`` are the size keys a model knows (``dim``, ``head_dim``, ``n_heads``); the one
    that the encoding's kind uses is passed on, and any other the encoding requires (a bias
    that needs ``head_dim``); a conflicting value in a dict spec raises.
    A dict spec holds ``"name"`` plus configuration keys, e.g. ``{"name": "learned",
    "max_positions": 512}``.
    """
    from .base import Encoding

    if isinstance(spec, Encoding):
        for key in _sizes_wanted(type(spec), sizes):
            if getattr(spec.config, key) != sizes[key]:
                raise ValueError(
                    f"encoding {spec.info.name!r} has {key}={getattr(spec.config, key)} "
                    f"but the model needs {key}={sizes[key]}"
                )
        return spec
    if isinstance(spec, str):
        name, config = spec, {}
    elif isinstance(spec, Mapping):
        if "name" not in spec:
            raise ValueError(f"an encoding dict needs a 'name' key, got keys {sorted(spec)}")
        config = dict(spec)
        name = config.pop("name")
    else:
        raise TypeError(
            f"encoding must be a name, a dict or an Encoding, got {type(spec).__name__}"
        )
    for key in _sizes_wanted(get(name), sizes):
        if key in config and config[key] != sizes[key]:
            raise ValueError(
                f"encoding {name!r} was given {key}={config[key]} "
                f"but the model needs {key}={sizes[key]}"
            )
        config[key] = sizes[key]
    return create(name, **config)
