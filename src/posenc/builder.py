"""Build an encoding for a model from the model's sizes: :func:`build`.

A model knows its ``dim``, ``head_dim`` and ``n_heads``; an encoding needs one of them (the
size key of its kind: ``dim`` additive, ``head_dim`` rotary, ``n_heads`` bias) and sometimes
another (Shaw's relative bias also needs ``head_dim``; PaTH's transforms, one per key head,
take the model's ``kv_heads`` where it has them). :func:`build` hands each encoding the
sizes it uses, so a model can take any encoding, given by name, by dict or as an instance,
without knowing which keys that encoding needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .arguments import check_int
from .base import Encoding
from .registry import create, get

__all__ = ["build"]


def _sizes_wanted(cls: type[Encoding], sizes: Mapping[str, Any]) -> list[str]:
    """The sizes a model fills in: the kind's size key, any other size the encoding
    requires (Shaw's ``head_dim``), and the key heads where its configuration has them
    (PaTH's ``kv_heads``)."""
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    wanted = {cls.size_key} | (set(cls.Config.required_keys()) & set(sizes))
    wanted |= {"kv_heads"} & fields & set(sizes)
    return sorted(k for k in wanted if k is not None and k in sizes)


def build(
    spec: str | Mapping[str, Any] | Encoding,
    *,
    dim: int | None = None,
    head_dim: int | None = None,
    n_heads: int | None = None,
    kv_heads: int | None = None,
    **config: Any,
) -> Encoding:
    """The encoding ``spec`` (a name, a dict with a ``"name"`` key, or an instance), built for
    a model of the given sizes.

    Of ``dim``, ``head_dim`` and ``n_heads`` (``None``: the model has no such size), the one
    the encoding's kind uses is passed on, and any other the encoding requires; the rest are
    ignored. A size that conflicts with one the spec already holds raises ``ValueError``
    rather than being overridden, as does a configuration key given both in a dict spec and
    in ``config``.

    Args:
        spec: ``"alibi"``, ``{"name": "learned", "max_positions": 512}`` or an ``Encoding``.
        dim: the model's embedding size (additive encodings).
        head_dim: the size of one attention head (rotary encodings; Shaw).
        n_heads: the number of query heads (bias encodings).
        kv_heads: the number of key/value heads (an encoding with one transform per key
            head: PaTH).
        config: more configuration keys of the encoding (not with an instance).

    Returns:
        an :class:`~posenc.base.Encoding`: ``spec`` itself when it is one.

    Example:
        >>> import posenc
        >>> [posenc.build(n, dim=64, head_dim=16, n_heads=4).kind for n in ("learned", "rope")]
        ['additive', 'rotary']
    """
    sizes = {
        key: value
        for key, value in (
            ("dim", dim),
            ("head_dim", head_dim),
            ("n_heads", n_heads),
            ("kv_heads", kv_heads),
        )
        if value is not None
    }
    for key, value in sizes.items():  # checked even where the encoding does not use it
        check_int(key, value)
    if isinstance(spec, Encoding):
        if config:
            raise TypeError(
                f"configuration keys {sorted(config)} cannot be applied to a built encoding"
            )
        for key in _sizes_wanted(type(spec), sizes):
            if getattr(spec.config, key) != sizes[key]:
                raise ValueError(
                    f"encoding {spec.info.name!r} has {key}={getattr(spec.config, key)} "
                    f"but the model needs {key}={sizes[key]}"
                )
        return spec
    if isinstance(spec, str):
        name, spec_config = spec, {}
    elif isinstance(spec, Mapping):
        if "name" not in spec:
            raise ValueError(f"an encoding dict needs a 'name' key, got keys {sorted(spec)}")
        spec_config = dict(spec)
        name = spec_config.pop("name")
    else:
        raise TypeError(
            f"spec (the encoding) must be a name, a dict or an Encoding, got {type(spec).__name__}"
        )
    both = sorted(set(spec_config) & set(config))
    if both:
        raise ValueError(f"configuration key(s) {both} given both in the encoding dict and apart")
    config = {**spec_config, **config}
    for key in _sizes_wanted(get(name), sizes):
        if key in config and config[key] != sizes[key]:
            raise ValueError(
                f"encoding {name!r} was given {key}={config[key]} "
                f"but the model needs {key}={sizes[key]}"
            )
        config[key] = sizes[key]
    return create(name, **config)
