"""The old path of :mod:`posenc.attn.planner` (before plain and bias attention shared one
planner): its names, for code that imports them from here."""

from .planner import (
    BACKENDS,
    FLEX_MIN_SCORES,
    AttnShape,
    BiasPlan,
    plan_bias,
    shares_table,
)

__all__ = [
    "BACKENDS",
    "FLEX_MIN_SCORES",
    "AttnShape",
    "BiasPlan",
    "plan_bias",
    "shares_table",
]
