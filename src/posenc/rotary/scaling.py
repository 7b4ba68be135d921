"""The parameters of RoPE's context-extension scalings: one validated record per ``rope_type``.

A record holds the keys of Hugging Face's ``rope_parameters`` for its type, checks their
values on creation, and calls its pure function in
:data:`posenc.functional.ROPE_SCALINGS` (which lists the formulas and papers). Its fields are
that function's keyword arguments, a test keeps them equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from ..config import EncodingConfig, check_float, check_int
from ..functional.rope import split_rope_parameters
from ..functional.rope_scaling import ROPE_SCALINGS

__all__ = ["SCALING_CONFIGS", "ScalingConfig", "parse_scaling"]


@dataclasses.dataclass(frozen=True)
class ScalingConfig(EncodingConfig):
    """Base of the scaling parameter records; ``rope_type`` names the scaling."""

    rope_type: ClassVar[str] = "default"
    #: whether the frequencies depend on the current sequence length
    depends_on_length: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.encoding_name = f"rope scaling {cls.rope_type!r}"  # named in error messages

    def to_dict(self) -> dict[str, Any]:
        return {"rope_type": self.rope_type, **super().to_dict()}

    def params(self) -> dict[str, Any]:
        """The parameters as keyword arguments of the scaling's function."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def inv_freq(
        self,
        head_dim: int,
        rotary_dim: int,
        base: float,
        seq_len: int | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, float]:
        """``(inv_freq, attention_factor)`` of this scaling: its function in
        :data:`~posenc.functional.ROPE_SCALINGS` called with these parameters.

        Shapes:
            inv_freq ``[rotary_dim // 2]`` (``[head_dim // 2]`` for ``proportional``), float64
        """
        fn = ROPE_SCALINGS[self.rope_type]
        return fn(head_dim, rotary_dim, float(base), seq_len, device, **self.params())


def _check_factor(factor: Any) -> None:
    check_float("factor", factor)
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (the context grows by it), got {factor}")


@dataclasses.dataclass(frozen=True)
class DefaultScaling(ScalingConfig):
    rope_type: ClassVar[str] = "default"


@dataclasses.dataclass(frozen=True)
class LinearScaling(ScalingConfig):
    rope_type: ClassVar[str] = "linear"
    factor: float

    def __post_init__(self) -> None:
        _check_factor(self.factor)


@dataclasses.dataclass(frozen=True)
class NTKScaling(ScalingConfig):
    rope_type: ClassVar[str] = "ntk"
    factor: float

    def __post_init__(self) -> None:
        _check_factor(self.factor)


@dataclasses.dataclass(frozen=True)
class DynamicScaling(ScalingConfig):
    rope_type: ClassVar[str] = "dynamic"
    depends_on_length: ClassVar[bool] = True
    factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        check_int("original_max_position_embeddings", self.original_max_position_embeddings)


@dataclasses.dataclass(frozen=True)
class NTKAlphaScaling(ScalingConfig):
    """Hunyuan's static NTK (:func:`~posenc.functional.rope_scaling.ntk_alpha_scaling`);
    the YaRN keys its checkpoints carry are accepted at their neutral values only."""

    rope_type: ClassVar[str] = "ntk_alpha"
    alpha: float
    factor: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 1.0
    beta_fast: float | None = None
    beta_slow: float | None = None
    original_max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        check_float("alpha", self.alpha)
        if self.alpha < 1:
            raise ValueError(f"alpha must be >= 1 (it stretches the base), got {self.alpha}")
        for name in ("factor", "mscale", "mscale_all_dim"):
            value = getattr(self, name)
            check_float(name, value)
            if value != 1:
                raise ValueError(
                    f"{name}={value} with alpha: Hunyuan's NTK-alpha reads no {name} (only 1, "
                    f"its neutral value, is accepted, not silently dropped)"
                )
        for name in ("beta_fast", "beta_slow"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name))
        if self.original_max_position_embeddings is not None:
            check_int("original_max_position_embeddings", self.original_max_position_embeddings)

    def to_dict(self) -> dict[str, Any]:
        """As the checkpoints write it: ``rope_type`` ``"dynamic"`` with ``alpha``."""
        return {**super().to_dict(), "rope_type": "dynamic"}


@dataclasses.dataclass(frozen=True)
class NTKMixedScaling(ScalingConfig):
    """NTK-RoPE-mixed (:func:`~posenc.functional.rope_scaling.ntk_mixed_scaling`), vLLM's
    ``ntk`` rope type; a Hugging Face config's ``{"rope_type": "ntk"}`` (no transformers
    type) reads as this."""

    rope_type: ClassVar[str] = "ntk_mixed"
    factor: float
    mixed_b: float | None = None

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        if self.mixed_b is not None:
            check_float("mixed_b", self.mixed_b)
            if self.mixed_b <= 0:
                raise ValueError(f"mixed_b must be > 0, got {self.mixed_b}")


@dataclasses.dataclass(frozen=True)
class YarnScaling(ScalingConfig):
    rope_type: ClassVar[str] = "yarn"
    factor: float
    original_max_position_embeddings: int
    attention_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        check_int("original_max_position_embeddings", self.original_max_position_embeddings)
        if self.attention_factor is not None:
            check_float("attention_factor", self.attention_factor)
        for name in ("mscale", "mscale_all_dim"):  # 0 means absent, as in DeepSeek configs
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), positive=False)
                if getattr(self, name) < 0:
                    raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        check_float("beta_fast", self.beta_fast)
        check_float("beta_slow", self.beta_slow)
        if self.beta_fast < self.beta_slow:  # equal: a step, not a ramp (Kimi-K2's 1 and 1)
            raise ValueError(
                f"beta_fast ({self.beta_fast}) must be >= beta_slow ({self.beta_slow})"
            )
        if not isinstance(self.truncate, bool):
            raise TypeError(f"truncate must be a bool, got {self.truncate!r}")


@dataclasses.dataclass(frozen=True)
class Llama3Scaling(ScalingConfig):
    rope_type: ClassVar[str] = "llama3"
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        check_float("low_freq_factor", self.low_freq_factor)
        check_float("high_freq_factor", self.high_freq_factor)
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                f"high_freq_factor ({self.high_freq_factor}) must exceed "
                f"low_freq_factor ({self.low_freq_factor})"
            )
        check_int("original_max_position_embeddings", self.original_max_position_embeddings)


@dataclasses.dataclass(frozen=True)
class LongRopeScaling(ScalingConfig):
    rope_type: ClassVar[str] = "longrope"
    depends_on_length: ClassVar[bool] = True
    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float | None = None
    attention_factor: float | None = None

    def __post_init__(self) -> None:
        for name in ("short_factor", "long_factor"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise TypeError(f"{name} must be a list of numbers, got {value!r}")
            for v in value:
                check_float(name, v)
            object.__setattr__(self, name, tuple(float(v) for v in value))
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"short_factor and long_factor differ in length: "
                f"{len(self.short_factor)} vs {len(self.long_factor)}"
            )
        check_int("original_max_position_embeddings", self.original_max_position_embeddings)
        if self.factor is None:
            raise ValueError(
                "longrope needs factor (max_position_embeddings / "
                "original_max_position_embeddings); posenc.hf.rope_from_hf_config fills it in"
            )
        check_float("factor", self.factor)
        if self.attention_factor is not None:
            check_float("attention_factor", self.attention_factor)


@dataclasses.dataclass(frozen=True)
class ProportionalScaling(ScalingConfig):
    rope_type: ClassVar[str] = "proportional"
    factor: float = 1.0

    def __post_init__(self) -> None:
        _check_factor(self.factor)


#: rope_type -> its parameter record; the same keys as ROPE_SCALINGS
SCALING_CONFIGS: dict[str, type[ScalingConfig]] = {
    cls.rope_type: cls
    for cls in (
        DefaultScaling,
        LinearScaling,
        NTKScaling,
        DynamicScaling,
        NTKAlphaScaling,
        NTKMixedScaling,
        YarnScaling,
        Llama3Scaling,
        LongRopeScaling,
        ProportionalScaling,
    )
}


def parse_scaling(scaling: Mapping[str, Any] | ScalingConfig | None) -> tuple[ScalingConfig, dict]:
    """Validate a ``rope_parameters``-style dict into its parameter record.

    ``rope_type`` (or the legacy ``type``) picks the scaling; ``rope_theta`` and
    ``partial_rotary_factor`` are returned apart, as they configure the encoding itself.
    Unknown types and keys raise ``ValueError`` naming the accepted ones.

    Returns:
        ``(record, encoding_keys)``, ``encoding_keys`` holding ``rope_theta`` /
        ``partial_rotary_factor`` if present.
    """
    if isinstance(scaling, ScalingConfig):
        return scaling, {}
    rope_type, params, encoding_keys = split_rope_parameters(scaling)
    return SCALING_CONFIGS[rope_type].from_kwargs(**params), encoding_keys
