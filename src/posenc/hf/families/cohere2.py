"""Cohere2 and AFMoE: RoPE on the sliding layers only, the full ones NoPE; sliding and
full by ``sliding_window_pattern``."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import FULL, SLIDING, Family, layer_types, one_rope, pattern, read_window

#: layer ``i`` full when ``(i + 1) % sliding_window_pattern == 0``
DERIVE = pattern("sliding_window_pattern", first_full=False)

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING), DERIVE)
    window = read_window(keys, types)
    rope = one_rope(keys, layout)  # Cohere2Attention rotates only where it has a window
    return [LayerSpec(rope, window=window) if t == SLIDING else LayerSpec(None) for t in types]


FAMILY = Family(read)
