"""The math of positional encodings as pure, differentiable functions: one file per family."""

from .sinusoidal import SINUSOIDAL_LAYOUTS, sinusoidal, sinusoidal_inv_freq

__all__ = ["SINUSOIDAL_LAYOUTS", "sinusoidal", "sinusoidal_inv_freq"]
