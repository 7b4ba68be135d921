"""RoPE context-extension scalings: one validated parameter record and one pure function per
``rope_type``, in the form of Hugging Face's ``rope_parameters``.

Every function has the signature ``fn(params, head_dim, rotary_dim, base, seq_len, device) ->
(inv_freq, attention_factor)``; ``inv_freq`` is float64 (``[n_pairs]``) so that angles stay
exact at positions in the millions, and ``attention_factor`` multiplies cos and sin once
(in :func:`posenc.functional.rope_cos_sin`), so attention logits scale by its square.

==============  ======================================================================
``default``     θ_i = base^(-2i/d) (Su et al. 2021, arXiv:2104.09864)
``linear``      position interpolation: θ_i / factor (Chen et al. 2023, arXiv:2306.15595)
``ntk``         NTK-aware: base' = base · factor^(d/(d-2)) (bloc97, 2023)
``dynamic``     NTK with factor' = factor·L/L_orig - (factor - 1) once L > L_orig
                (Hugging Face "dynamic"; keys in a KV cache keep the old base)
``yarn``        NTK-by-parts ramp between beta_fast and beta_slow, temperature
                0.1·ln(factor) + 1 (Peng et al. 2023, arXiv:2309.00071)
``llama3``      wavelengths < L/high_freq_factor kept, > L/low_freq_factor divided by
                factor, smooth between (Meta, Llama 3.1)
``longrope``    per-pair factors: short up to L_orig, long beyond; attention factor
                sqrt(1 + ln(factor)/ln(L_orig)) (Ding et al. 2024, arXiv:2402.13753)
``proportional`` a fraction of the pairs rotate with base^(-2i/head_dim), the rest not at
                all, all divided by factor (Hugging Face "proportional", Gemma)
==============  ======================================================================
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch

from ..config import EncodingConfig, check_float, check_int

__all__ = ["ROPE_SCALINGS", "ScalingConfig", "default_inv_freq", "ntk_base", "parse_scaling"]

#: keys of a Hugging Face ``rope_parameters`` dict that are not scaling parameters: they
#: configure the encoding itself and are read by :class:`posenc.rotary.RoPE`
ENCODING_KEYS = ("rope_theta", "partial_rotary_factor")


def default_inv_freq(
    rotary_dim: int, base: float, *, denominator: int | None = None, device=None
) -> torch.Tensor:
    """θ_i = base^(-2i/denominator) for i < rotary_dim/2, in float64.

    Shapes:
        returns ``[rotary_dim // 2]``
    """
    denominator = denominator or rotary_dim
    exponents = torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float64) / denominator
    return float(base) ** -exponents


@dataclasses.dataclass(frozen=True)
class ScalingConfig(EncodingConfig):
    """Base of the scaling parameter records; ``rope_type`` names the scaling."""

    rope_type: ClassVar[str] = "default"
    #: whether the frequencies depend on the current sequence length
    depends_on_length: ClassVar[bool] = False

    def to_dict(self) -> dict[str, Any]:
        return {"rope_type": self.rope_type, **super().to_dict()}


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
        if self.beta_fast <= self.beta_slow:
            raise ValueError(
                f"beta_fast ({self.beta_fast}) must exceed beta_slow ({self.beta_slow})"
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


def _default(p: DefaultScaling, head_dim, rotary_dim, base, seq_len, device):
    """θ_i = base^(-2i/d) (Su et al. 2021, arXiv:2104.09864)."""
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def _linear(p: LinearScaling, head_dim, rotary_dim, base, seq_len, device):
    """Position interpolation f(x, m) = f(x, m / factor), as θ_i / factor (Chen et al. 2023,
    arXiv:2306.15595)."""
    return default_inv_freq(rotary_dim, base, device=device) / p.factor, 1.0


def ntk_base(base: float, factor: float, rotary_dim: int, rope_type: str = "ntk") -> float:
    """The NTK-aware base' = base · factor^(d/(d-2)) for rotary dimension d (bloc97, 2023)."""
    if rotary_dim <= 2:
        raise ValueError(
            f"{rope_type!r} scaling needs a rotary dimension > 2 (base · factor^(d/(d-2))), "
            f"got {rotary_dim}"
        )
    return base * factor ** (rotary_dim / (rotary_dim - 2))


def _ntk(p: NTKScaling, head_dim, rotary_dim, base, seq_len, device):
    """NTK-aware: base' = base · factor^(d/(d-2)), positions unchanged (bloc97, 2023)."""
    base = ntk_base(base, p.factor, rotary_dim, "ntk")
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def _dynamic(p: DynamicScaling, head_dim, rotary_dim, base, seq_len, device):
    """Dynamic NTK: past L_orig, base' = base · (factor·L/L_orig - (factor - 1))^(d/(d-2));
    the default at or below L_orig (Hugging Face "dynamic", after bloc97 and emozilla 2023)."""
    original = p.original_max_position_embeddings
    seq_len = original if seq_len is None else max(seq_len, original)
    factor = p.factor * seq_len / original - (p.factor - 1)
    base = ntk_base(base, factor, rotary_dim, "dynamic")
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature sqrt(1/t) = 0.1·mscale·ln(factor) + 1 (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(p: YarnScaling, head_dim, rotary_dim, base, seq_len, device):
    """YaRN (Peng et al. 2023, arXiv:2309.00071): pairs with wavelengths that fit more than
    beta_fast times into L_orig keep θ_i, those fitting fewer than beta_slow times use
    θ_i / factor, with a linear ramp in pair index between (the reference code's ramp);
    attention factor 0.1·ln(factor) + 1, or DeepSeek's mscale ratio, or as given."""
    if p.attention_factor is not None:
        attention_factor = p.attention_factor
    elif p.mscale and p.mscale_all_dim:  # DeepSeek: the ratio of two temperatures
        attention_factor = yarn_mscale(p.factor, p.mscale) / yarn_mscale(p.factor, p.mscale_all_dim)
    else:
        attention_factor = yarn_mscale(p.factor)

    def correction_dim(rotations: float) -> float:
        # the pair index whose wavelength fits `rotations` times in the original context
        ratio = p.original_max_position_embeddings / (rotations * 2 * math.pi)
        return rotary_dim * math.log(ratio) / (2 * math.log(base))

    low, high = correction_dim(p.beta_fast), correction_dim(p.beta_slow)
    if p.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # a ramp of zero width would divide by zero
    pairs = torch.arange(rotary_dim // 2, device=device, dtype=torch.float64)
    # 1 where the pair keeps its frequency (extrapolation), 0 where it is interpolated
    keep = 1 - ((pairs - low) / (high - low)).clamp(0, 1)
    inv_freq = default_inv_freq(rotary_dim, base, device=device)
    return inv_freq / p.factor * (1 - keep) + inv_freq * keep, attention_factor


def _llama3(p: Llama3Scaling, head_dim, rotary_dim, base, seq_len, device):
    """Llama 3.1: wavelengths λ < L_orig/high_freq_factor keep θ_i, λ > L_orig/low_freq_factor
    use θ_i / factor, and between, (1 - s)·θ_i/factor + s·θ_i with
    s = (L_orig/λ - low_freq_factor) / (high_freq_factor - low_freq_factor) (Meta 2024)."""
    inv_freq = default_inv_freq(rotary_dim, base, device=device)
    original = p.original_max_position_embeddings
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor)
    smoothed = (1 - smooth) * inv_freq / p.factor + smooth * inv_freq
    scaled = torch.where(wavelength > original / p.low_freq_factor, inv_freq / p.factor, inv_freq)
    is_medium = (wavelength >= original / p.high_freq_factor) & (
        wavelength <= original / p.low_freq_factor
    )
    return torch.where(is_medium, smoothed, scaled), 1.0


def _longrope(p: LongRopeScaling, head_dim, rotary_dim, base, seq_len, device):
    """LongRoPE (Ding et al. 2024, arXiv:2402.13753; Phi-3): θ_i / short_factor_i up to
    L_orig, θ_i / long_factor_i beyond; attention factor sqrt(1 + ln(factor)/ln(L_orig)).
    The choice follows seq_len, so keys cached before the switch keep the short factors."""
    original = p.original_max_position_embeddings
    if len(p.long_factor) != rotary_dim // 2:
        raise ValueError(
            f"longrope factors have {len(p.long_factor)} entries but the rotary dimension "
            f"{rotary_dim} has {rotary_dim // 2} pairs"
        )
    if p.attention_factor is not None:
        attention_factor = p.attention_factor
    elif p.factor <= 1:
        attention_factor = 1.0
    else:
        attention_factor = math.sqrt(1 + math.log(p.factor) / math.log(original))
    factors = p.long_factor if seq_len is not None and seq_len > original else p.short_factor
    ext = torch.tensor(factors, device=device, dtype=torch.float64)
    return default_inv_freq(rotary_dim, base, device=device) / ext, attention_factor


def _proportional(p: ProportionalScaling, head_dim, rotary_dim, base, seq_len, device):
    """Proportional (Hugging Face, Gemma): the first rotary_dim/2 pairs use
    base^(-2i/head_dim), the others do not rotate; all divided by factor."""
    # the rotated pairs take their exponent over the whole head; the remaining pairs of the
    # head get frequency 0 (no rotation), so this scaling always covers head_dim
    rotated = default_inv_freq(rotary_dim, base, denominator=head_dim, device=device)
    still = torch.zeros(head_dim // 2 - rotary_dim // 2, device=device, dtype=torch.float64)
    return torch.cat((rotated, still)) / p.factor, 1.0


ScalingFn = Callable[..., tuple[torch.Tensor, float]]

#: rope_type -> (parameter record, function)
ROPE_SCALINGS: dict[str, tuple[type[ScalingConfig], ScalingFn]] = {
    "default": (DefaultScaling, _default),
    "linear": (LinearScaling, _linear),
    "ntk": (NTKScaling, _ntk),
    "dynamic": (DynamicScaling, _dynamic),
    "yarn": (YarnScaling, _yarn),
    "llama3": (Llama3Scaling, _llama3),
    "longrope": (LongRopeScaling, _longrope),
    "proportional": (ProportionalScaling, _proportional),
}
for _type, (_cls, _fn) in ROPE_SCALINGS.items():
    _cls.encoding_name = f"rope scaling {_type!r}"


def parse_scaling(scaling: Mapping[str, Any] | ScalingConfig | None) -> tuple[ScalingConfig, dict]:
    """Validate a ``rope_parameters``-style dict into its parameter record.

    ``rope_type`` (or the legacy ``type``) picks the scaling; ``rope_theta`` and
    ``partial_rotary_factor`` are returned apart, as they configure the encoding itself.
    Unknown types and keys raise ``ValueError`` naming the accepted ones.

    Returns:
        ``(record, encoding_keys)``, ``encoding_keys`` holding ``rope_theta`` /
        ``partial_rotary_factor`` if present.
    """
    if scaling is None:
        return DefaultScaling(), {}
    if isinstance(scaling, ScalingConfig):
        return scaling, {}
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict or None, got {type(scaling).__name__}")
    params = dict(scaling)
    if "type" in params:
        legacy = params.pop("type")
        if params.setdefault("rope_type", legacy) != legacy:
            raise ValueError(f"scaling has type={legacy!r} and rope_type={params['rope_type']!r}")
    rope_type = params.pop("rope_type", "default")
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"unknown rope_type {rope_type!r}; accepted: {sorted(ROPE_SCALINGS)}")
    encoding_keys = {k: params.pop(k) for k in ENCODING_KEYS if k in params}
    return ROPE_SCALINGS[rope_type][0].from_kwargs(**params), encoding_keys
