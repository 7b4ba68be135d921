"""3-D rotary position embedding of video latents, as the video diffusion transformers use
it: the head's pairs split into a temporal, a height and a width part, each a RoPE of its
own coordinate with its own frequencies (Wan 2.1, Wan team 2025, arXiv:2503.20314;
HunyuanVideo, Kong et al. 2024, arXiv:2412.03603; NVIDIA Cosmos, 2025, arXiv:2501.03575).

Axis ``a`` (t, h, w) has ``d_a`` channels, ``d_a / 2`` pairs, and pair ``i`` of it turns by
``p_a · θ_a^(-2i / d_a)``, ``θ_a = base · s_a^(d_a / (d_a - 2))``: Cosmos's per-axis
NTK-aware scaling by ``s_a`` (``rope_scale``, 1 for Wan and HunyuanVideo). The pairs are
ordered t, h, w; the angles are M-RoPE's sectioned ones
(:func:`~posenc.functional.mrope.mrope_cos_sin`), with these frequencies.

Published splits: Wan and Cosmos give ``h = w = 2⌊d/6⌋`` channels and the rest to t
(:func:`video_axes_dim`); HunyuanVideo ``(16, 56, 56)`` of 128 with base 256. Wan and
HunyuanVideo pair channels interleaved (``2i, 2i + 1``), Cosmos in halves (``i, i + d/2``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .dtypes import wide_dtype

__all__ = ["VIDEO_AXES", "video_axes_dim", "video_rope_inv_freq"]

#: the coordinates of a video token, in the order of the pairs they turn
VIDEO_AXES = ("t", "h", "w")


def video_axes_dim(head_dim: int) -> tuple[int, int, int]:
    """Wan's and Cosmos's split of a head: ``h = w = 2·⌊head_dim / 6⌋`` channels, the rest
    (at least as many) to t.

    Example:
        >>> video_axes_dim(128)
        (44, 42, 42)
    """
    hw = 2 * (head_dim // 6)
    return head_dim - 2 * hw, hw, hw


def video_rope_inv_freq(
    axes_dim: Sequence[int],
    base: float = 10000.0,
    scale: Sequence[float] = (1.0, 1.0, 1.0),
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The frequencies of every pair, the t pairs first, then h, then w (float64 where the
    device has it).

    Args:
        axes_dim: channels per axis ``(t, h, w)``, each even.
        base: the wavelength base θ of every axis before scaling.
        scale: per-axis NTK factor ``s_a``: ``θ_a = base · s_a^(d_a / (d_a - 2))``.

    Shapes:
        returns ``[sum(axes_dim) // 2]``
    """
    dtype = wide_dtype(torch.device("cpu") if device is None else torch.device(device))
    parts = []
    for dim, s in zip(axes_dim, scale, strict=True):
        theta = base * (s ** (dim / (dim - 2)) if s != 1.0 else 1.0)
        exponent = torch.arange(0, dim, 2, dtype=dtype, device=device) / dim
        parts.append(1.0 / theta**exponent)
    return torch.cat(parts)
