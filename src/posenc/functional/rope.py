"""Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).

Pair i of a query or key at position m is rotated by the angle m·θ_i, so that
⟨R(m) q, R(n) k⟩ depends on q, k and n - m only, and norms are kept.

Two pair layouts exist in the wild, and a checkpoint only works in the one it was trained in:

- ``half`` (GPT-NeoX, Hugging Face Llama): pair i is dimensions (i, i + d/2);
- ``interleaved`` (the paper, GPT-J, Meta's reference code): pair i is (2i, 2i + 1).

They differ by a fixed permutation of the q/k dimensions
(:func:`posenc.rotary.permute_for_layout` converts projection weights).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from .rope_scaling import ROPE_SCALINGS, ScalingConfig, parse_scaling

__all__ = ["ROPE_LAYOUTS", "apply_rope", "rope_angles", "rope_cos_sin", "rope_inv_freq"]

ROPE_LAYOUTS = ("half", "interleaved")


def rope_inv_freq(
    head_dim: int,
    base: float = 10000.0,
    scaling: Mapping[str, Any] | ScalingConfig | None = None,
    seq_len: int | None = None,
    *,
    rotary_dim: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, float]:
    """The per-pair frequencies θ_i and the attention factor of a (scaled) RoPE.

    Args:
        head_dim: size of each attention head.
        base: the wavelength base (``rope_theta``).
        scaling: a Hugging Face ``rope_parameters`` dict (``{"rope_type": "yarn",
            "factor": 4.0, ...}``) or None; see :mod:`posenc.functional.rope_scaling`.
        seq_len: the current sequence length, for the length-dependent scalings
            (``dynamic``, ``longrope``).
        rotary_dim: how many leading dimensions of each head rotate (default ``head_dim``).

    Returns:
        ``(inv_freq, attention_factor)``: ``inv_freq`` ``[rotary_dim // 2]`` in float64
        (``[head_dim // 2]`` for ``proportional``), and the factor that multiplies cos/sin.
    """
    params, _ = parse_scaling(scaling)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    fn = ROPE_SCALINGS[params.rope_type][1]
    return fn(params, head_dim, rotary_dim, float(base), seq_len, device)


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Angles ``positions ⊗ inv_freq`` reduced modulo 2π, computed in float64.

    A float32 product loses the phase at large positions (an angle of 1e7 radians has a
    float32 spacing of 1); float64 keeps it to ~1e-9 rad up to 1e7 and beyond. Devices
    without float64 (Apple MPS) fall back to float32.

    Shapes:
        positions ``[...]``, inv_freq ``[n]`` -> ``[..., n]`` (float64, or float32 on MPS)
    """
    dtype = torch.float32 if positions.device.type == "mps" else torch.float64
    angles = positions.to(dtype).unsqueeze(-1) * inv_freq.to(positions.device, dtype)
    return torch.remainder(angles, 2 * math.pi)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles, times the attention factor, in float32.

    This is the one place the attention factor (YaRN's temperature, LongRoPE's scale) is
    applied: multiplying both cos and sin scales q and k, hence the logits by its square,
    as the reference implementations do.

    Shapes:
        positions ``[seq]`` or ``[batch, seq]``, inv_freq ``[n]`` ->
        cos, sin ``[seq, n]`` or ``[batch, seq, n]`` (float32; float64 positions keep float64)
    """
    out = torch.float64 if positions.dtype == torch.float64 else torch.float32
    angles = rope_angles(positions, inv_freq)
    return (angles.cos() * attention_factor).to(out), (angles.sin() * attention_factor).to(out)


def apply_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> torch.Tensor:
    """Rotate the pairs of ``x`` by the angles whose cos/sin are given.

    The first ``2 * cos.shape[-1]`` dimensions of each head rotate (partial rotary: the
    rest pass through unchanged). The math runs in float32 (float64 for float64 input) and
    is rounded once to ``x.dtype``.

    cos/sin may also be 4-D, one rotation per head (RoPE-Mixed's learned frequencies).

    Shapes:
        x ``[batch, heads, seq, head_dim]``; cos, sin ``[seq, n]``, ``[batch, seq, n]`` or
        ``[batch or 1, heads, seq, n]`` with ``2n <= head_dim`` ->
        ``[batch, heads, seq, head_dim]``
    """
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {list(ROPE_LAYOUTS)}, got {layout!r}")
    n = cos.shape[-1]
    if cos.dim() == 3:  # [b, s, n] -> [b, 1, s, n]: one rotation for every head
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    elif cos.dim() == 4 and cos.shape[1] not in (1, x.shape[1]):  # [b, h, s, n]: per head
        raise ValueError(
            f"per-head cos/sin have {cos.shape[1]} heads but x has {x.shape[1]}: "
            "they must be [batch or 1, heads of x (or 1), seq, n]"
        )
    dtype = torch.float64 if torch.float64 in (x.dtype, cos.dtype) else torch.float32
    cos, sin = cos.to(dtype), sin.to(dtype)
    rot = x[..., : 2 * n].to(dtype)
    if layout == "half":
        x1, x2 = rot[..., :n], rot[..., n:]
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        pairs = rot.unflatten(-1, (n, 2))  # [b, h, s, n, 2]
        x1, x2 = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    rotated = rotated.to(x.dtype)
    if 2 * n == x.shape[-1]:
        return rotated
    return torch.cat((rotated, x[..., 2 * n :]), dim=-1)
