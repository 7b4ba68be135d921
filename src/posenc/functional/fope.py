"""FoPE: Fourier position embedding (Hua et al. 2025, "Fourier Position Embedding:
Enhancing Attention's Periodic Extension for Length Generalization", ICML, arXiv:2412.17739).

RoPE's pair ``i`` turns at one frequency ``θ_i = base^(-2i/d)``. FoPE changes its tables in
two ways:

1. **Clip to floor.** A frequency whose period ``2π/θ_i`` is longer than the training
   length never completes a turn in training, so it is under-trained; FoPE sets it to zero:
   the pair does not turn (cos 1, sin 0) and carries content only.
2. **Fourier series.** Each kept pair's cos and sin become series over the ``K`` kept
   frequencies, with learned coefficients (per key/value head):

       cos_i(m) = Σ_j C[j, i]·cos(θ_j·m),     sin_i(m) = Σ_j S[j, i]·sin(θ_j·m)

   and the pair turns as in RoPE: ``(a, b) ↦ (a·cos_i(m) − b·sin_i(m), a·sin_i(m) +
   b·cos_i(m))``. The off-diagonal terms model the other frequencies that linear layers and
   activations leak into each dimension ("spectral damage"); with ``C = S = I`` this is
   RoPE with the clipped frequencies. With harmonics the transform is no longer a
   rotation, and scores are no longer a function of ``n − m`` alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .dtypes import math_dtype
from .rope import rope_angles

__all__ = ["fope_cos_sin", "fope_inv_freq"]


def fope_inv_freq(
    head_dim: int,
    base: float,
    train_length: int | None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """RoPE's frequencies ``θ_i = base^(-2i/d)`` (float64), the ones whose period
    ``2π/θ_i`` exceeds ``train_length`` set to 0 (None: none clipped). They are decreasing,
    so the kept ones come first. Made on ``device`` (no copy from the host per call).

    Shapes:
        -> ``[head_dim // 2]``

    Example:
        >>> fope_inv_freq(8, 10000.0, train_length=100).tolist()  # periods 6.3, 63, 628, 6283
        [1.0, 0.1, 0.0, 0.0]
    """
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim
    inv_freq = 1.0 / base**exponent
    if train_length is None:
        return inv_freq
    return torch.where(inv_freq >= 2 * math.pi / train_length, inv_freq, 0.0)


def fope_cos_sin(
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    cos_coef: torch.Tensor,
    sin_coef: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FoPE's tables: the Fourier series of every kept pair, cos 1 and sin 0 for the
    clipped ones (the pairs after the first ``K``).

    The angles are computed in float64 and reduced modulo 2π (as RoPE's); their cos and sin
    are rounded once to float32 (float64 for float64 positions or coefficients) and mixed
    by the coefficients in that precision.

    Args:
        positions: ``[seq]`` or ``[batch, seq]``.
        inv_freq: every pair's frequency (:func:`fope_inv_freq`), the ``K`` kept first.
        cos_coef, sin_coef: ``C`` and ``S`` per key/value head, ``[heads, K, K]``: entry
            ``[h, j, i]`` weighs frequency ``j`` in pair ``i``.

    Shapes:
        -> cos, sin ``[batch or 1, heads, seq, head_dim // 2]``
    """
    kept = cos_coef.shape[-1]
    out = math_dtype(positions.dtype, cos_coef.dtype)
    angles = rope_angles(positions, inv_freq[:kept])  # [(b,) seq, K]
    if angles.dim() == 2:
        angles = angles.unsqueeze(0)
    angles = angles.unsqueeze(1)  # [b | 1, 1, seq, K]
    cos = angles.cos().to(out) @ cos_coef.to(out)  # [b | 1, heads, seq, K]
    sin = angles.sin().to(out) @ sin_coef.to(out)
    clipped = inv_freq.shape[-1] - kept
    return F.pad(cos, (0, clipped), value=1.0), F.pad(sin, (0, clipped), value=0.0)
