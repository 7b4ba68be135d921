"""The math of positional encodings as pure, differentiable functions: one file per family.

The bottom layer of posenc: nothing here imports from the rest of the package.
"""

from .alibi import alibi_bias, alibi_slope, alibi_slopes
from .axial_rope import (
    AXIS_ORDERS,
    axial_rope_cos_sin,
    axial_rope_inv_freq,
    rope_mixed_cos_sin,
    rope_mixed_freqs,
)
from .dtypes import math_dtype, wide_dtype
from .fire import FIRE_EPS, fire_input, fire_mlp, fire_mlp_matmul, fire_psi
from .grid import GRID_ORDERS, RESAMPLE_MODES, grid_table_index, resample_grid_table, sincos_2d
from .kerple import KERPLE_VARIANTS, clamp_straight_through, kerple_bias
from .latent import join_latent_heads, mla_softmax_scale
from .mrope import (
    MROPE_AXES,
    check_mrope_section,
    default_mrope_section,
    mrope_axis,
    mrope_cos_sin,
)
from .rope import ROPE_LAYOUTS, apply_rope, rope_angles, rope_cos_sin, rope_inv_freq
from .rope_kernel import apply_rope_fast
from .rope_scaling import ROPE_SCALINGS
from .shaw import shaw_index, shaw_key_bias, shaw_key_scores, shaw_value_term
from .sinusoidal import SINUSOIDAL_LAYOUTS, sin_cos_encoding, sinusoidal, sinusoidal_inv_freq
from .t5 import t5_relative_bucket
from .temporal import (
    CALENDAR_FIELDS,
    CALENDAR_SIZES,
    calendar_fields,
    calendar_sinusoidal,
    time2vec,
    timestamp_encoding,
    timestamp_inv_freq,
)
from .xpos import apply_xpos, xpos_max_distance, xpos_scale, xpos_zeta

__all__ = [
    "AXIS_ORDERS",
    "CALENDAR_FIELDS",
    "CALENDAR_SIZES",
    "FIRE_EPS",
    "GRID_ORDERS",
    "KERPLE_VARIANTS",
    "MROPE_AXES",
    "RESAMPLE_MODES",
    "ROPE_LAYOUTS",
    "ROPE_SCALINGS",
    "SINUSOIDAL_LAYOUTS",
    "alibi_bias",
    "alibi_slope",
    "alibi_slopes",
    "apply_rope",
    "apply_rope_fast",
    "apply_xpos",
    "axial_rope_cos_sin",
    "axial_rope_inv_freq",
    "calendar_fields",
    "calendar_sinusoidal",
    "check_mrope_section",
    "clamp_straight_through",
    "default_mrope_section",
    "fire_input",
    "fire_mlp",
    "fire_mlp_matmul",
    "fire_psi",
    "grid_table_index",
    "join_latent_heads",
    "kerple_bias",
    "math_dtype",
    "mla_softmax_scale",
    "mrope_axis",
    "mrope_cos_sin",
    "resample_grid_table",
    "rope_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_mixed_cos_sin",
    "rope_mixed_freqs",
    "shaw_index",
    "shaw_key_bias",
    "shaw_key_scores",
    "shaw_value_term",
    "sin_cos_encoding",
    "sincos_2d",
    "sinusoidal",
    "sinusoidal_inv_freq",
    "t5_relative_bucket",
    "time2vec",
    "timestamp_encoding",
    "timestamp_inv_freq",
    "wide_dtype",
    "xpos_max_distance",
    "xpos_scale",
    "xpos_zeta",
]
