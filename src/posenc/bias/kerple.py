"""KERPLE: a learned logarithmic or power kernel of the distance, per head (Chi et al. 2022,
"KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
arXiv:2205.09921). The math is in :mod:`posenc.functional.kerple`.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..base import BiasConfig, BiasEncoding, ShiftInvariant
from ..config import check_choice, check_float, check_int
from ..functional.dtypes import math_dtype
from ..functional.kerple import KERPLE_VARIANTS, clamp_straight_through, kerple_bias
from ..registry import register

__all__ = ["Kerple"]

#: the reference's upper bounds of the uniform initialisation, (r1, r2) per variant
REFERENCE_INIT = {"log": (2.0, 1.0), "power": (1.0, 2.0)}
#: the largest exponent for which the power kernel is conditionally positive definite
MAX_POWER = 2.0


@dataclasses.dataclass(frozen=True)
class KerpleConfig(BiasConfig):
    """Configuration of :class:`Kerple`.

    Attributes:
        n_heads: attention heads, one learned (r1, r2) pair each.
        variant: ``"log"`` (``-r1·log(1 + r2·|m - n|)``) or ``"power"``
            (``-r1·|m - n|^r2``).
        init_r1_max: r1 starts uniform in ``(0, init_r1_max]`` (None: the reference's
            bound, 2 for ``log``, 1 for ``power``).
        init_r2_max: r2 starts uniform in ``(0, init_r2_max]`` (None: the reference's
            bound, 1 for ``log``, 2 for ``power``; at most 2 for ``power``).
        eps: the smallest value r1 and r2 take (1e-2 as in the reference).
    """

    n_heads: int
    variant: str = "log"
    init_r1_max: float | None = None
    init_r2_max: float | None = None
    eps: float = 1e-2

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads)
        check_choice("variant", self.variant, KERPLE_VARIANTS)
        for name in ("init_r1_max", "init_r2_max"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name))
        check_float("eps", self.eps)
        if self.variant == "power":
            for name, value in (("init_r2_max", self.init_r2_max), ("eps", self.eps)):
                if value is not None and value > MAX_POWER:
                    raise ValueError(
                        f"{name} must be <= {MAX_POWER} for variant='power' (the exponent "
                        f"r2 lies in (0, 2]), got {value}"
                    )

    def init_bounds(self) -> tuple[float, float]:
        """The upper bounds of the uniform initialisation of r1 and r2."""
        r1_max, r2_max = REFERENCE_INIT[self.variant]
        return (
            r1_max if self.init_r1_max is None else self.init_r1_max,
            r2_max if self.init_r2_max is None else self.init_r2_max,
        )


@register(
    "kerple",
    trainable=True,
    relative=True,
    extrapolates=True,
    reference="Chi et al. 2022, KERPLE, arXiv:2205.09921",
    summary="a learned log (or power) kernel of the distance per head: -r1·log(1 + r2·|m-n|)",
    formula=(
        "s_mn = q_m·k_n/√d + b_h(m, n),  r1_h, r2_h ≥ eps learned per head (eps = 0.01)\n"
        "log: b_h = −r1_h·log(1 + r2_h·|m − n|);  power: b_h = −r1_h·|m − n|^r2_h, r2_h ≤ 2"
    ),
)
class Kerple(ShiftInvariant, BiasEncoding):
    """KERPLE: ``b(m, n) = -r1·log(1 + r2·|m - n|)`` (``log``) or ``-r1·|m - n|^r2``
    (``power``), with ``r1``, ``r2`` learned per head.

    Positivity: the parameters ``r1``, ``r2`` are stored as they are trained, and every
    forward uses them clamped to ``[eps, ∞)`` (the power exponent to ``[eps, 2]``) with a
    straight-through gradient (:func:`~posenc.functional.kerple.clamp_straight_through`):
    each step's value and gradient are the reference's (it clamps the stored values in
    place before each forward), without mutating parameters inside the forward; the
    stored values may drift past the bound where the reference's are reset. Initialisation
    as in the reference: ``r1``, ``r2`` uniform in ``(0, max)``, raised to ``eps``.

    The bias depends only on ``|m - n|``, so it serves causal and bidirectional attention
    alike. The paper (and its GPT-NeoX code) has one kernel per layer; posenc's
    ``TransformerLM`` shares one encoding across layers.

    Shapes:
        ``bias(q_positions, k_positions)``: ``[n_heads, q_len, k_len]``; parameters ``r1``,
        ``r2``: ``[n_heads]``.

    Example:
        >>> enc = Kerple(n_heads=4)
        >>> enc.bias(torch.arange(3), torch.arange(3)).shape
        torch.Size([4, 3, 3])
    """

    Config = KerpleConfig
    config: KerpleConfig

    def __init__(self, config: KerpleConfig | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        n = self.config.n_heads
        self.r1 = nn.Parameter(torch.empty(n, **self.factory_kwargs))
        self.r2 = nn.Parameter(torch.empty(n, **self.factory_kwargs))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        r1_max, r2_max = self.config.init_bounds()
        eps = self.config.eps
        self.r1.uniform_(0.0, r1_max).clamp_(min=eps)
        self.r2.uniform_(0.0, r2_max).clamp_(min=eps)

    def kernel_parameters(
        self, head: torch.Tensor, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r1, r2)`` of ``head`` as the forward uses them: in ``dtype``, clamped to their
        range with a straight-through gradient.

        Shapes:
            head: any integer tensor -> two tensors of its shape
        """
        eps, power = self.config.eps, self.config.variant == "power"
        r1 = clamp_straight_through(self.r1[head].to(dtype), eps)
        r2 = clamp_straight_through(self.r2[head].to(dtype), eps, MAX_POWER if power else None)
        return r1, r2

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        dtype = math_dtype(q_pos.dtype, k_pos.dtype, self.r1.dtype)
        distance = (q_pos - k_pos).abs().to(dtype)  # exact for integer positions
        r1, r2 = self.kernel_parameters(head, dtype)
        return kerple_bias(distance, r1, r2, self.config.variant)
