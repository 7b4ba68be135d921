"""Additive encodings: added to the token embeddings before the first layer."""

from .grid import GridOutOfRangeError, LearnedGrid, SinCos2D
from .learned import Learned
from .sinusoidal import ScaledSinusoidal, Sinusoidal
from .temporal import Calendar, Time2Vec, Timestamp

__all__ = [
    "Calendar",
    "GridOutOfRangeError",
    "Learned",
    "LearnedGrid",
    "ScaledSinusoidal",
    "SinCos2D",
    "Sinusoidal",
    "Time2Vec",
    "Timestamp",
]
