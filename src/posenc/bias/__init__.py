"""Bias encodings: add a term to the attention scores before softmax."""

from .alibi import ALiBi
from .cope import CoPE
from .fire import Fire
from .fox import Fox
from .kerple import Kerple
from .path import Path
from .shaw import Shaw
from .stick_breaking import StickBreaking
from .t5 import T5Bias

__all__ = ["ALiBi", "CoPE", "Fire", "Fox", "Kerple", "Path", "Shaw", "StickBreaking", "T5Bias"]
