"""posenc: positional encodings for transformers, behind one small API.

>>> import posenc
>>> enc = posenc.create("sinusoidal", dim=64)
>>> enc.kind
'additive'
"""

from . import additive, bias, functional, models, nope, positions, rotary
from .attn import KVCache, StaticKVCache, attention
from .base import AdditiveEncoding, BiasEncoding, Encoding, NoEncoding, RotaryEncoding
from .builder import build
from .composite import Compose, compose
from .encoding_info import EncodingInfo
from .host_reads import set_validation, validation, validation_enabled
from .positions import PositionOutOfRangeError
from .registry import available, create, info

__version__ = "0.1.0"

__all__ = [
    "AdditiveEncoding",
    "BiasEncoding",
    "Compose",
    "Encoding",
    "EncodingInfo",
    "KVCache",
    "NoEncoding",
    "PositionOutOfRangeError",
    "RotaryEncoding",
    "StaticKVCache",
    "__version__",
    "additive",
    "attention",
    "available",
    "bias",
    "build",
    "compose",
    "create",
    "functional",
    "info",
    "models",
    "nope",
    "positions",
    "rotary",
    "set_validation",
    "validation",
    "validation_enabled",
]
