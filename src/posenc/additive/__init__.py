"""Additive encodings: added to the token embeddings before the first layer."""

from .learned import Learned
from .sinusoidal import ScaledSinusoidal, Sinusoidal

__all__ = ["Learned", "ScaledSinusoidal", "Sinusoidal"]
