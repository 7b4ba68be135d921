"""FoPE: RoPE whose pairs turn by learned Fourier series, the frequencies too slow to be
trained clipped to zero (Hua et al. 2025, ICML, arXiv:2412.17739). The math is in
:mod:`posenc.functional.fope`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from ..base import RotaryConfig, RotaryEncoding
from ..config import check_choice, check_float, check_int
from ..functional.fope import fope_cos_sin, fope_inv_freq
from ..functional.rope import ROPE_LAYOUTS
from ..functional.rope_kernel import rotate_checked
from ..registry import register
from .inputs import check_rotate
from .rope import check_seq_len

__all__ = ["FoPE"]


@dataclasses.dataclass(frozen=True)
class FopeConfig(RotaryConfig):
    """Configuration of :class:`FoPE`.

    Attributes:
        head_dim: size of each attention head (even).
        base: RoPE's wavelength base θ.
        layout: ``"half"`` (pairs i, i + d/2) or ``"interleaved"`` (2i, 2i + 1).
        train_length: the training length: frequencies whose period ``2π/θ_i`` exceeds it
            are set to zero (clip to floor). None: none are clipped (the Fourier series
            alone).
        n_kv_heads: key/value heads, one pair of coefficient matrices each; the query
            heads of a group use their key head's. 1: one set shared by every head.
        sigma: the standard deviation of the harmonics at initialisation (the paper's
            σ; 0.3 is its choice at its 60M scale): each off-diagonal coefficient is drawn
            from ``N(0, σ²/K)`` over the ``K`` kept frequencies, the diagonal is 1. 0: RoPE
            (with the clipped frequencies) until training moves them.
    """

    head_dim: int
    base: float = 10000.0
    layout: str = "half"
    train_length: int | None = None
    n_kv_heads: int = 1
    sigma: float = 0.3

    def __post_init__(self) -> None:
        check_int("head_dim", self.head_dim, minimum=2, even=True)
        check_float("base", self.base)
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        check_choice("layout", self.layout, ROPE_LAYOUTS)
        if self.train_length is not None:
            check_int("train_length", self.train_length)
        check_int("n_kv_heads", self.n_kv_heads)
        check_float("sigma", self.sigma, positive=False)
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0 (a standard deviation), got {self.sigma}")
        if not fope_inv_freq(self.head_dim, self.base, self.train_length).count_nonzero():
            raise ValueError(
                f"train_length={self.train_length} clips every frequency of head_dim="
                f"{self.head_dim}, base={self.base} (the fastest has period 2π): nothing "
                "would turn; use a longer train_length, or nope"
            )


@register(
    "fope",
    trainable=True,
    relative=False,
    extrapolates=True,
    reference=(
        "Hua et al. 2025, Fourier Position Embedding: Enhancing Attention's Periodic "
        "Extension for Length Generalization, ICML, arXiv:2412.17739"
    ),
    summary="RoPE with a learned Fourier series per pair; frequencies too slow to train clipped",
    formula=(
        "pair i at position m: (a, b) ↦ (a·cos_i(m) − b·sin_i(m), a·sin_i(m) + b·cos_i(m)),\n"
        "cos_i(m) = Σ_j C[j, i]·cos(θ_j·m),  sin_i(m) = Σ_j S[j, i]·sin(θ_j·m) over kept θ_j,\n"
        "θ_j = base^(−2j/d) kept if 2π/θ_j ≤ train_length; clipped pairs do not turn;\n"
        "C, S learned per key/value head (initially I + N(0, σ²/K) off the diagonal)"
    ),
)
class FoPE(RotaryEncoding):
    """Fourier position embedding: per pair a learned Fourier series over the kept RoPE
    frequencies (see :mod:`posenc.functional.fope`).

    Parameters: ``cos_coef`` and ``sin_coef``, ``[n_kv_heads, K, K]`` (``K`` kept
    frequencies; entry ``[h, j, i]`` weighs frequency ``j`` in pair ``i``). Not relative:
    with harmonics the scores depend on the positions, not only on their difference, and
    the transform is no longer a rotation (norms change).

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]`` with
        ``heads`` and ``kv_heads`` multiples of ``n_kv_heads``, positions ``[seq]`` or
        ``[batch, seq]`` -> q, k of the same shapes.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("fope", head_dim=8, train_length=100)
        >>> enc.cos_coef.shape  # 2 of 4 pairs kept
        torch.Size([1, 2, 2])
        >>> q = torch.randn(1, 2, 5, 8)
        >>> q2, _ = enc(q, q)
        >>> bool(torch.equal(q2[..., [2, 3, 6, 7]], q[..., [2, 3, 6, 7]]))  # clipped: unturned
        True
    """

    Config = FopeConfig
    config: FopeConfig

    def __init__(self, config: FopeConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        kept = int(self.inv_freq().count_nonzero())
        shape = (self.config.n_kv_heads, kept, kept)
        self.cos_coef = nn.Parameter(torch.empty(shape, **self.factory_kwargs))
        self.sin_coef = nn.Parameter(torch.empty(shape, **self.factory_kwargs))
        self.reset_parameters()

    def inv_freq(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Every pair's frequency, the clipped ones 0 (float64). Shapes: ``[head_dim // 2]``."""
        c = self.config
        return fope_inv_freq(c.head_dim, c.base, c.train_length, device)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The identity (each pair's own frequency) plus ``N(0, σ²/K)`` harmonics off the
        diagonal, drawn anew for each matrix."""
        kept = self.cos_coef.shape[-1]
        for coef in (self.cos_coef, self.sin_coef):
            coef.normal_(0.0, self.config.sigma / math.sqrt(kept))
            coef.diagonal(dim1=-2, dim2=-1).fill_(1.0)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` per key/value head: ``[batch or 1, n_kv_heads, seq, d/2]``, float32
        (float64 for float64 positions or parameters). ``seq_len`` changes nothing (no
        scaling depends on it) but is checked."""
        check_seq_len(seq_len)
        positions = self.check_positions(positions)
        inv_freq = self.inv_freq(positions.device)
        return fope_cos_sin(positions, inv_freq, self.cos_coef, self.sin_coef)

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """``x`` turned by :meth:`rotation`'s tables of its positions, each query head by
        the series of its key/value head.

        Shapes:
            x ``[batch, heads, seq, head_dim]`` (``heads`` a multiple of ``n_kv_heads``),
            rotation ``[batch or 1, n_kv_heads, seq, head_dim // 2]`` each -> as x.
        """
        sets = self.config.n_kv_heads
        cos, sin = check_rotate(
            self, x, rotation, key, width=self.head_dim // 2, heads=(sets, sets)
        )
        heads = x.shape[1]
        if heads % sets:
            raise ValueError(
                f"{'k' if key else 'q'} has {heads} heads, not a multiple of fope's "
                f"n_kv_heads={sets}: each key/value head has its own coefficients"
            )
        if heads != sets:  # the heads of a group use their key head's series
            cos, sin = (
                cos.repeat_interleave(heads // sets, 1),
                sin.repeat_interleave(heads // sets, 1),
            )
        return rotate_checked(x, cos, sin, self.config.layout)
