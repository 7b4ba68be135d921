"""Gemma 3: sliding and full layers by ``sliding_window_pattern``, each type with its own
RoPE (``rope_parameters[layer_type]``; ``rope_local_base_freq`` for the local ones in an
old ``config.json``)."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import (
    FULL,
    SLIDING,
    Family,
    causal_only,
    layer_types,
    pattern,
    per_type_ropes,
    read_window,
)

#: layer ``i`` full when ``(i + 1) % sliding_window_pattern == 0``
DERIVE = pattern("sliding_window_pattern", first_full=False)

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    causal_only(keys)
    if keys.get("attn_logit_softcapping") is not None:
        raise ValueError(
            f"attn_logit_softcapping={keys.get('attn_logit_softcapping')!r}: transformers' "
            "Gemma3Attention never passes it to the attention (its scores are not capped); "
            "posenc does not guess which was meant: set it to None"
        )
    types = layer_types(keys, (FULL, SLIDING), DERIVE)
    window = read_window(keys, types)
    thetas = {FULL: "rope_theta", SLIDING: "rope_local_base_freq"}
    ropes = per_type_ropes(keys, layout, types, thetas)
    return [LayerSpec(ropes[t], window=window if t == SLIDING else None) for t in types]


FAMILY = Family(read, scale_key="query_pre_attn_scalar")
