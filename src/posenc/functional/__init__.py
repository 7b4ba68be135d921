"""The math of positional encodings as pure, differentiable functions: one file per family."""

from .rope import ROPE_LAYOUTS, apply_rope, rope_angles, rope_cos_sin, rope_inv_freq
from .rope_scaling import ROPE_SCALINGS
from .sinusoidal import SINUSOIDAL_LAYOUTS, sinusoidal, sinusoidal_inv_freq

__all__ = [
    "ROPE_LAYOUTS",
    "ROPE_SCALINGS",
    "SINUSOIDAL_LAYOUTS",
    "apply_rope",
    "rope_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "sinusoidal",
    "sinusoidal_inv_freq",
]
