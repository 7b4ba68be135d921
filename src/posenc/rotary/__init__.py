"""Rotary encodings: rotate queries and keys inside every attention layer."""

from . import axial, mrope  # noqa: F401  (register rope_2d, rope_mixed, mrope)
from .layouts import layout_permutation, permute_for_layout
from .rope import RoPE
from .xpos import XPos

__all__ = ["RoPE", "XPos", "layout_permutation", "permute_for_layout"]
