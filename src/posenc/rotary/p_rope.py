"""p-RoPE: RoPE with its lowest frequencies removed (Barbero et al. 2025, "Round and Round
We Go! What makes Rotary Positional Encodings useful?", ICLR, arXiv:2410.06205).

The fraction ``p`` of a head's pairs with the highest frequencies rotate as in RoPE,
``θ_i = base^(-2i/d)`` for ``i < p·d/2``; the others get frequency 0 and do not rotate, so
they carry content only (the paper finds the lowest frequencies act as semantic channels
that RoPE makes unstable over long distances). It is the formula of Hugging Face's
``proportional`` rope type (Gemma), with ``partial_rotary_factor = p``:
``p_rope(p)`` equals ``rope`` with ``scaling={"rope_type": "proportional"}`` and that
factor. ``p = 1`` is RoPE; ``p = 0`` would be NoPE (use ``nope``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..config import check_float
from ..registry import register
from .rope import RoPE, RopeConfig

__all__ = ["PRoPE"]


@dataclasses.dataclass(frozen=True)
class PRopeConfig(RopeConfig):
    """Configuration of :class:`PRoPE`: :class:`~posenc.rotary.rope.RopeConfig` with the
    paper's parameter.

    Attributes:
        p: the fraction of each head's pairs that rotate, in (0, 1] (the paper's p; 0.75 is
            its best at Gemma 2B). Sets ``partial_rotary_factor``, and the scaling is the
            ``proportional`` one (its ``factor`` may be given in ``scaling``).
    """

    p: float = 0.75

    fraction_name: ClassVar[str] = "p"

    def __post_init__(self) -> None:
        check_float("p", self.p)
        if not 0 < self.p <= 1:
            raise ValueError(f"p must be in (0, 1] (the fraction of pairs that turn), got {self.p}")
        scaling = self.scaling
        if scaling is None:
            scaling = {"rope_type": "proportional"}
        kind = scaling.get("rope_type") if isinstance(scaling, dict) else None
        kind = getattr(scaling, "rope_type", kind)  # a parsed record (from to_dict)
        if kind != "proportional":
            raise ValueError(
                f"p_rope's scaling is the proportional one, got {scaling!r}: give "
                "{'rope_type': 'proportional', 'factor': ...} or none"
            )
        if self.partial_rotary_factor not in (None, self.p):
            raise ValueError(
                f"partial_rotary_factor={self.partial_rotary_factor} conflicts with p={self.p}"
            )
        object.__setattr__(self, "scaling", scaling)
        object.__setattr__(self, "partial_rotary_factor", self.p)
        super().__post_init__()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("partial_rotary_factor", None)  # p says it
        out.pop("rotary_dim", None)
        return out


@register(
    "p_rope",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference=(
        "Barbero et al. 2025, Round and Round We Go! What makes Rotary Positional "
        "Encodings useful?, ICLR, arXiv:2410.06205"
    ),
    summary="RoPE on the fraction p of pairs with the highest frequencies; the rest do not turn",
    formula=(
        "pair i of q and k at position m turns by m·θ_i, θ_i = base^(−2i/d) for i < p·d/2,\n"
        "θ_i = 0 (no rotation) for the rest: the lowest frequencies removed;  Hugging Face's\n"
        "'proportional' rope type with partial_rotary_factor = p (p = 1: RoPE)"
    ),
)
class PRoPE(RoPE):
    """p-RoPE: :class:`~posenc.rotary.RoPE` whose lowest-frequency pairs do not rotate.

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq]`` or ``[batch, seq]`` -> rotated q, k of the same shapes.

    Example:
        >>> import torch, posenc
        >>> enc = posenc.create("p_rope", head_dim=8, p=0.5)
        >>> enc.inv_freq().tolist()  # 2 of 4 pairs turn: base^(-0/8), base^(-2/8)
        [1.0, 0.1, 0.0, 0.0]
        >>> q = torch.randn(1, 1, 3, 8)
        >>> q2, _ = enc(q, q)
        >>> bool(torch.equal(q2[..., [2, 3, 6, 7]], q[..., [2, 3, 6, 7]]))  # half layout
        True
    """

    Config = PRopeConfig
    config: PRopeConfig
