"""Rotary encodings: rotate queries and keys inside every attention layer."""

from .axial import RoPE2D, RoPEMixed
from .dca import DualChunkRoPE
from .fope import FoPE
from .latent import LatentRoPE
from .layouts import layout_permutation, permute_for_layout
from .mrope import MRoPE
from .p_rope import PRoPE
from .pope import PoPE
from .rope import RoPE
from .video import RoPE3D
from .xpos import XPos

__all__ = [
    "DualChunkRoPE",
    "FoPE",
    "LatentRoPE",
    "MRoPE",
    "PRoPE",
    "PoPE",
    "RoPE",
    "RoPE2D",
    "RoPE3D",
    "RoPEMixed",
    "XPos",
    "layout_permutation",
    "permute_for_layout",
]
