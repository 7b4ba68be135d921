"""OLMo 3, Ministral, CWM, Mellum, Laguna: sliding and full ``layer_types`` (which a
``config.json`` must give), every layer rotating (with a RoPE per layer type where
``rope_parameters`` is nested by type)."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys, nested_rope_keys
from ..rope import rope_from_hf_config
from .common import FULL, SLIDING, Family, layer_types, one_rope, read_window

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    """Sliding and full layers by ``layer_types``, the window on the sliding ones, every
    layer rotating with the one RoPE or with its layer type's (``rope_parameters`` per
    layer type: OLMo 3): the families whose attention reads no more than that."""
    if keys.get("layer_types") is None:
        keys.need("layer_types", "says which layers slide (the config class derives it)")
    types = layer_types(keys, (FULL, SLIDING))
    window = read_window(keys, types)
    if nested_rope_keys(keys.get("rope_parameters") or {}):
        each = dict.fromkeys(types)  # one RoPE per layer type, shared by its layers
        ropes = {t: rope_from_hf_config(keys.config, layout=layout, layer_type=t) for t in each}
    else:
        ropes = dict.fromkeys(types, one_rope(keys, layout))
    return [LayerSpec(ropes[t], window=window if t == SLIDING else None) for t in types]


FAMILY = Family(read)
