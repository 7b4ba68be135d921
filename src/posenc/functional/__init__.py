"""The math of positional encodings as pure, differentiable functions: one file per family."""

from .alibi import alibi_bias, alibi_slope, alibi_slopes
from .fire import FIRE_EPS, fire_input, fire_mlp, fire_psi
from .kerple import KERPLE_VARIANTS, clamp_straight_through, kerple_bias
from .rope import ROPE_LAYOUTS, apply_rope, rope_angles, rope_cos_sin, rope_inv_freq
from .rope_scaling import ROPE_SCALINGS
from .shaw import shaw_index, shaw_key_bias, shaw_key_scores, shaw_value_term
from .sinusoidal import SINUSOIDAL_LAYOUTS, sin_cos_encoding, sinusoidal, sinusoidal_inv_freq
from .t5 import t5_relative_bucket
from .temporal import (
    CALENDAR_FIELDS,
    CALENDAR_SIZES,
    calendar_features,
    calendar_fields,
    calendar_sinusoidal,
    time2vec,
    timestamp_encoding,
    timestamp_inv_freq,
)

__all__ = [
    "CALENDAR_FIELDS",
    "CALENDAR_SIZES",
    "FIRE_EPS",
    "KERPLE_VARIANTS",
    "ROPE_LAYOUTS",
    "ROPE_SCALINGS",
    "SINUSOIDAL_LAYOUTS",
    "alibi_bias",
    "alibi_slope",
    "alibi_slopes",
    "apply_rope",
    "calendar_features",
    "calendar_fields",
    "calendar_sinusoidal",
    "clamp_straight_through",
    "fire_input",
    "fire_mlp",
    "fire_psi",
    "kerple_bias",
    "rope_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "shaw_index",
    "shaw_key_bias",
    "shaw_key_scores",
    "shaw_value_term",
    "sin_cos_encoding",
    "sinusoidal",
    "sinusoidal_inv_freq",
    "t5_relative_bucket",
    "time2vec",
    "timestamp_encoding",
    "timestamp_inv_freq",
]
