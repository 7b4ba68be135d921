"""Query temperature tuning: queries scaled up, slowly, with their position (Llama 4).

Llama 4 (Meta 2025, "The Llama 4 herd"; transformers' ``Llama4TextAttention``) multiplies
the queries of its NoPE layers by a factor that grows with the log of the position, so
that attention stays sharp over very long contexts where a softmax over more keys flattens
(the argument of Scalable-Softmax, Nakanishi 2025, arXiv:2501.19399)::

    factor(p) = log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1

It is exactly 1 for the first ``floor_scale - 1`` positions, then steps up at every
multiple of ``floor_scale``. transformers reads the positions of the queries in the
sequence (``cache_position``: ``arange(seq)`` after the cached tokens); a model that gives
per-document or per-prompt positions passes those instead. :class:`QueryTemperature` is
the record a layer keeps; :func:`query_temperature` the math.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import check_float, check_int
from ..positions import check_positions

__all__ = ["QueryTemperature", "query_temperature"]


def query_temperature(
    positions: torch.Tensor, floor_scale: int = 8192, attn_scale: float = 0.1
) -> torch.Tensor:
    """Llama 4's query scale ``log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1``.

    The floor is taken in float64 (exact for every position up to 2**53), the rest in
    float32, as transformers computes it (equal to it for positions below 2**24, where its
    float32 ``p + 1`` is still exact).

    Args:
        positions: the queries' positions, integer or floating, >= 0.
        floor_scale: the number of positions per step (Llama 4: 8192).
        attn_scale: the strength of each step (Llama 4: 0.1).

    Shapes:
        positions: ``[len]`` or ``[batch, len]`` -> the same shape, float32.

    Example:
        >>> query_temperature(torch.tensor([0, 8190, 8191, 3 * 8192 - 1])).tolist()
        [1.0, 1.0, 1.06931471824646, 1.13862943649292]
    """
    check_int("floor_scale", floor_scale)
    check_float("attn_scale", attn_scale)
    positions = check_positions(positions)
    steps = torch.floor((positions.double() + 1.0) / floor_scale).float()
    return torch.log1p(steps) * attn_scale + 1.0


@dataclass(frozen=True)
class QueryTemperature:
    """The settings of :func:`query_temperature` for one layer (Llama 4's defaults).

    Attributes:
        floor_scale: positions per step, an int >= 1.
        attn_scale: the strength of each step, a number > 0.

    Example:
        >>> QueryTemperature()(torch.arange(3)).tolist()
        [1.0, 1.0, 1.0]
    """

    floor_scale: int = 8192
    attn_scale: float = 0.1

    def __post_init__(self) -> None:
        check_int("floor_scale", self.floor_scale)
        check_float("attn_scale", self.attn_scale)

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        """:func:`query_temperature` of ``positions`` with these settings."""
        return query_temperature(positions, self.floor_scale, self.attn_scale)

    def describe(self) -> str:
        """``"floor 8192, scale 0.1"``."""
        return f"floor {self.floor_scale}, scale {self.attn_scale:g}"
