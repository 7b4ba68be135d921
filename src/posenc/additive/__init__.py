"""Additive encodings: added to the token embeddings before the first layer."""

from . import grid  # noqa: F401  (registers sincos_2d, learned_2d)
from .learned import Learned
from .sinusoidal import ScaledSinusoidal, Sinusoidal
from .temporal import Calendar, Time2Vec, Timestamp

__all__ = ["Calendar", "Learned", "ScaledSinusoidal", "Sinusoidal", "Time2Vec", "Timestamp"]
