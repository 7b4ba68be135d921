"""gpt-oss: alternating sliding and full layers, sinks on every layer, YaRN."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import FULL, SLIDING, Family, alternate, layer_types, one_rope, read_window

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    if keys.get("rope_parameters") is None and keys.get("rope_scaling") is None:
        raise ValueError(
            "a gpt_oss config without rope_parameters: transformers' GptOssConfig fills in "
            "YaRN (factor 32) then, which posenc does not assume: give rope_parameters"
        )
    types = layer_types(keys, (FULL, SLIDING), alternate)
    window = read_window(keys, types)
    rope = one_rope(keys, layout)
    return [LayerSpec(rope, window=window if t == SLIDING else None, sinks=True) for t in types]


FAMILY = Family(read)
