"""Re-rotating cached keys: keys a RoPE turned at their positions, turned again so that they
are what another RoPE (or the same one) gives at shifted positions, without the raw keys.

Rotations of one pair compose: ``R(b)·R(a)⁻¹ = R(b - a)``. A key cached as ``f·R(p·θ)·k``
(frequencies ``θ``, attention factor ``f``) becomes ``f'·R((p + δ)·θ')·k``, what RoPE with
frequencies ``θ'`` and factor ``f'`` gives at position ``p + δ``, by one more rotation, by
``(p + δ)·θ' - p·θ`` with both sides scaled by ``f'/f``. Exact up to the key's rounding:
the angle is computed in float64 and reduced mod 2π, as :func:`~posenc.functional.rope.
rope_cos_sin` does. Uses: a cache shifted or spliced (StreamingLLM's sinks with a rolling
window, Xiao et al. 2023, arXiv:2309.17453), a prompt cache reused at another offset, and
LongRoPE crossing from its short to its long factors (Ding et al. 2024,
arXiv:2402.13753), where transformers recomputes the keys and llama.cpp re-rotates them.
"""

from __future__ import annotations

import math

import torch

from .dtypes import wide_dtype
from .rope import rotary_offset
from .rope_kernel import apply_rope_fast

__all__ = ["rerotate_keys", "rerotation"]


def rerotation(
    positions: torch.Tensor,
    old: tuple[torch.Tensor, float],
    new: tuple[torch.Tensor, float],
    delta: int | torch.Tensor = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The cos and sin that turn keys rotated at ``positions`` by ``old`` into keys rotated
    at ``positions + delta`` by ``new``.

    Args:
        positions: ``[n]`` or ``[batch, n]`` integers, where the keys were rotated.
        old, new: ``(inv_freq, attention_factor)`` of the two rotations, ``inv_freq``
            ``[pairs]`` each (the same number of pairs).
        delta: the shift of the positions, an int or a tensor broadcastable to
            ``positions`` (one per row).

    Returns:
        ``(cos, sin)``, ``positions.shape + (pairs,)``, float32 (float64 on float64
        positions, as :func:`~posenc.functional.rope.rope_cos_sin`).
    """
    (old_freq, old_factor), (new_freq, new_factor) = old, new
    if old_freq.shape != new_freq.shape or old_freq.dim() != 1:
        raise ValueError(
            f"old and new must rotate the same pairs: inv_freq [pairs] each, got "
            f"{tuple(old_freq.shape)} and {tuple(new_freq.shape)}"
        )
    if positions.is_floating_point():
        raise TypeError(f"positions must be integers, got {positions.dtype}")
    if not (math.isfinite(old_factor) and old_factor > 0 and math.isfinite(new_factor)):
        raise ValueError(
            f"attention factors must be finite and the old one > 0, got {old_factor}, {new_factor}"
        )
    dtype = wide_dtype(positions.device)
    p = positions.to(dtype).unsqueeze(-1)
    moved = p + torch.as_tensor(delta, device=positions.device).to(dtype).unsqueeze(-1)
    angle = moved * new_freq.to(positions.device, dtype) - p * old_freq.to(positions.device, dtype)
    angle = torch.remainder(angle, 2 * math.pi)
    out = torch.float64 if positions.dtype == torch.float64 else torch.float32
    ratio = new_factor / old_factor
    return (angle.cos() * ratio).to(out), (angle.sin() * ratio).to(out)


def rerotate_keys(
    keys: torch.Tensor,
    positions: torch.Tensor,
    old: tuple[torch.Tensor, float],
    new: tuple[torch.Tensor, float] | None = None,
    delta: int | torch.Tensor = 0,
    layout: str = "half",
    rotary_at: str = "start",
) -> torch.Tensor:
    """``keys`` rotated at ``positions`` by ``old``, as ``new`` (default: ``old``) rotates
    them at ``positions + delta`` (:func:`rerotation`); the rotary channels are a head's
    first (``rotary_at="start"``) or last (``"end"``), the others unchanged.

    Shapes:
        keys ``[batch, kv_heads, n, head_dim]``; positions ``[n]`` or ``[batch, n]`` ->
        ``[batch, kv_heads, n, head_dim]`` in the keys' dtype.
    """
    cos, sin = rerotation(positions, old, old if new is None else new, delta)
    offset = rotary_offset(rotary_at, keys.shape[-1], cos.shape[-1])
    return apply_rope_fast(keys, cos, sin, layout, offset=offset)
