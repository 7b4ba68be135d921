"""What :func:`~posenc.attn.planner.plan` returns for an attention call: a :class:`Plan`,
the runner's name (:data:`Runner`) and what the runner needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BiasPlan", "Plan", "Runner"]


Runner = Literal[
    "weights",
    "path",
    "scores",
    "math",
    "flex",
    "shaw",
    "sdpa",
    "fast",
    "distance",
    "rows",
    "linear",
    "flash",
]


@dataclass(frozen=True)
class Plan:
    """How one attention call runs.

    Attributes:
        runner: the runner's name in :data:`~posenc.attn.runners.RUNNERS`.
        table: the bias table the runner needs when the caller gives none: ``"full"``
            (``encoding.bias(q_positions, k_positions)``, FoX's materialised from its
            clock) or None (the runner computes the bias per score or from its distances,
            or there is none).
        slopes: the ``linear`` runner's slopes per head.
        blocks: the ``linear`` runner's centring blocks per head (None: it chooses).
        forget: the runner takes FoX's clock as extra key coordinates
            (:func:`~posenc.attn.forget.forget_keys`), as plain attention.
    """

    runner: Runner
    table: Literal["full"] | None = None
    slopes: list[float] | None = None
    blocks: list[int] | None = None
    forget: bool = False


#: the record's name before plain attention shared it
BiasPlan = Plan
