"""NoPE: no positional encoding (Haviv et al. 2022, arXiv:2203.16634; Kazemnejad et al. 2023,
arXiv:2305.19466). A causal decoder still learns order from the mask alone; a bidirectional
encoder without positions cannot tell a sequence from any permutation of it.
"""

from __future__ import annotations

import dataclasses

from .base import NoEncoding
from .config import EncodingConfig
from .registry import register

__all__ = ["NoPE"]


@dataclasses.dataclass(frozen=True)
class NoPEConfig(EncodingConfig):
    """NoPE has nothing to configure."""


@register(
    "nope",
    trainable=False,
    relative=False,
    extrapolates=True,
    reference="Kazemnejad et al. 2023, arXiv:2305.19466; Haviv et al. 2022, arXiv:2203.16634",
    summary="no positional signal: order comes from the causal mask alone",
    formula=(
        "s_ij = q_i·k_j/√d for j ≤ i (causal mask), no positional term anywhere:\n"
        "order reaches the model only through the mask"
    ),
)
class NoPE(NoEncoding):
    """No positional encoding. Requires a causal mask to carry any order at all."""

    Config = NoPEConfig
