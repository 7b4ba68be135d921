"""Gemma 2: alternating sliding and full layers, ``attn_logit_softcapping`` on every layer,
the score scale ``query_pre_attn_scalar ** -0.5``."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import (
    FULL,
    SLIDING,
    Family,
    alternate,
    causal_only,
    layer_types,
    one_rope,
    read_window,
)

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    causal_only(keys)
    types = layer_types(keys, (FULL, SLIDING), alternate)
    window = read_window(keys, types)
    softcap = keys.need("attn_logit_softcapping", "caps every layer's scores")
    rope = one_rope(keys, layout)
    return [
        LayerSpec(rope, window=window if t == SLIDING else None, softcap=softcap) for t in types
    ]


FAMILY = Family(read, scale_key="query_pre_attn_scalar")
