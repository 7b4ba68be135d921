"""PoPE: polar coordinate positional embeddings (Gopalakrishnan et al. 2025,
arXiv:2509.10534): content sets each channel's magnitude, position alone its phase."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch
from torch import nn

from ..base import RotaryConfig, RotaryEncoding
from ..config import check_choice, check_float, check_int
from ..functional.dtypes import math_dtype
from ..functional.pope import pope_embed, pope_inv_freq
from ..functional.rope import rope_angles
from ..registry import register
from .inputs import check_rotate
from .rope import check_seq_len

__all__ = ["PoPE"]

#: the ways to initialise the phase offsets δ: all zero, or uniform over ``[−2π, 0]``
PHASE_INITS = ("zeros", "uniform")


@dataclasses.dataclass(frozen=True)
class PopeConfig(RotaryConfig):
    """Configuration of :class:`PoPE`.

    Attributes:
        head_dim: size of each attention head before the encoding (q and k come out twice
            as wide).
        n_heads: query heads, each with its own phase offsets δ.
        base: the wavelength base of the ``head_dim`` frequencies ``θ_c = base^(−c/d)``.
        phase_init: ``"zeros"`` (the offsets start at 0) or ``"uniform"`` (drawn from
            ``U(−2π, 0)``: x-transformers' ``polar_bias_uniform_init``).
    """

    head_dim: int
    n_heads: int
    base: float = 10000.0
    phase_init: str = "zeros"

    def __post_init__(self) -> None:
        check_int("head_dim", self.head_dim)
        check_int("n_heads", self.n_heads)
        check_float("base", self.base)
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        check_choice("phase_init", self.phase_init, PHASE_INITS)


@register(
    "pope",
    trainable=True,
    relative=True,
    extrapolates=True,
    reference=(
        "Gopalakrishnan et al. 2025, Decoupling the 'What' and 'Where' With Polar "
        "Coordinate Positional Embeddings, arXiv:2509.10534"
    ),
    summary="each channel a complex number: magnitude softplus(content), phase position·θ; "
    "q, k twice as wide",
    formula=(
        "q̃_c = softplus(q_c)·e^{i(t·θ_c − δ_c)},  k̃_c = softplus(k_c)·e^{i·s·θ_c}\n"
        "score = Σ_c softplus(q_c)·softplus(k_c)·cos((t − s)·θ_c − δ_c) / √d_h\n"
        "θ_c = base^(−c/d_h), one per channel; δ_c a learned phase offset per head"
    ),
)
class PoPE(RotaryEncoding):
    """Polar positional embedding: every channel of q and k becomes a complex number,
    ``softplus(x_c)·e^{iφ_c}``, with the phase ``φ_c = position·θ_c`` (minus the head's
    learned offset ``δ_c`` on the queries), written as the real vector ``[μ·cos φ,
    μ·sin φ]`` (:mod:`posenc.functional.pope`).

    Its :meth:`rotate` makes q and k twice as wide (``width_factor = 2``);
    :func:`posenc.attention` keeps the score scale of the input width, ``1/√head_dim``,
    the values keep theirs, and :class:`~posenc.models.TransformerLM` caches the wider keys.
    The scores depend on ``t − s`` alone (relative), and through the magnitudes on content
    alone: a key's content cannot turn its phase, as a RoPE pair's can.

    Parameter: ``phase`` ``[n_heads, head_dim]``, the offsets ``δ``. They are angles, so
    posenc leaves them unclamped (any ``δ`` gives the scores of one in ``[−2π, 0]``).
    x-transformers clamps them to ``[−2π, 0]``: the same scores while ``δ`` stays there,
    but a clamp stops the gradient at its ends, the initial 0 among them (half the
    directions a zero-initialised offset could move are blocked).

    Shapes:
        q ``[batch, n_heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq]`` or ``[batch, seq]`` -> q ``[batch, n_heads, seq, 2·head_dim]``,
        k ``[batch, kv_heads, seq, 2·head_dim]``.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("pope", head_dim=8, n_heads=2)
        >>> q, k = enc(torch.randn(1, 2, 5, 8), torch.randn(1, 1, 5, 8))
        >>> q.shape, k.shape
        (torch.Size([1, 2, 5, 16]), torch.Size([1, 1, 5, 16]))
    """

    Config = PopeConfig
    config: PopeConfig
    width_factor: ClassVar[int] = 2

    def __init__(self, config: PopeConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        c = self.config
        self.phase = nn.Parameter(torch.empty(c.n_heads, c.head_dim, **self.factory_kwargs))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        if self.config.phase_init == "uniform":
            self.phase.uniform_(-2 * math.pi, 0.0)
        else:
            self.phase.zero_()

    def inv_freq(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The frequencies ``θ_c`` (float64). Shapes: ``[head_dim]``."""
        return pope_inv_freq(self.config.head_dim, self.config.base, device)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of the keys' phases ``s·θ_c`` and of the queries' ``t·θ_c − δ_c``
        per head: ``[(batch,) seq, d]`` and ``[batch or 1, n_heads, seq, d]``, float32
        (float64 for float64 positions or parameters). Angles are float64, reduced mod 2π.
        ``seq_len`` changes nothing (no scaling depends on it) but is checked."""
        check_seq_len(seq_len)
        positions = self.check_positions(positions)
        angles = rope_angles(positions, self.inv_freq(positions.device))  # [(b,) seq, d]
        out = math_dtype(positions.dtype, self.phase.dtype)
        offset = self.phase.to(angles.dtype)  # [h, d]: an angle, unclamped (see the class)
        shifted = angles.unsqueeze(-3) - offset.unsqueeze(-2)  # [(b,) h, seq, d]
        if shifted.dim() == 3:
            shifted = shifted.unsqueeze(0)
        return (
            angles.cos().to(out),
            angles.sin().to(out),
            shifted.cos().to(out),
            shifted.sin().to(out),
        )

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """``x`` as magnitudes turned into complex numbers: keys (``key=True``) by the
        keys' phases, queries by each head's shifted ones (:meth:`rotation`).

        Shapes:
            x ``[batch, heads, seq, head_dim]`` (queries: ``n_heads`` heads) ->
            ``[batch, heads, seq, 2 · head_dim]``.
        """
        k_cos, k_sin, q_cos, q_sin = check_rotate(
            self,
            x,
            rotation,
            key,
            width=self.head_dim,
            heads=(None, None, self.config.n_heads, self.config.n_heads),
        )
        if key:
            if k_cos.dim() == 3:  # [b, seq, d]: one table for every head
                k_cos, k_sin = k_cos.unsqueeze(1), k_sin.unsqueeze(1)
            return pope_embed(x, k_cos, k_sin)
        if x.shape[1] != self.config.n_heads:
            raise ValueError(
                f"q has {x.shape[1]} heads but pope has n_heads={self.config.n_heads}: each "
                "query head has its own phase offsets"
            )
        return pope_embed(x, q_cos, q_sin)
