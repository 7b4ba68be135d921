"""Configuration of an encoding: one frozen dataclass per variant, validated on creation.

Every encoding declares a ``Config`` dataclass. :meth:`EncodingConfig.from_kwargs` turns the
keyword arguments of :func:`posenc.create` into it and rejects unknown keys by name, and each
``__post_init__`` rejects impossible values, so nothing is silently ignored or clamped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from .arguments import (  # noqa: F401 - re-exported: the encodings' configs use them
    MAX_FLOAT,
    MAX_INT,
    MAX_POSITION,
    check_bool,
    check_choice,
    check_device,
    check_float,
    check_generator,
    check_int,
    check_tensor,
)

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
