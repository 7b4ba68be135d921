"""Bias encodings: add a term to the attention scores before softmax."""

from .alibi import ALiBi
from .fire import Fire
from .kerple import Kerple
from .shaw import Shaw
from .t5 import T5Bias

__all__ = ["ALiBi", "Fire", "Kerple", "Shaw", "T5Bias"]
