"""Rotary encodings: rotate queries and keys inside every attention layer."""

from .rope import RoPE

__all__ = ["RoPE"]
