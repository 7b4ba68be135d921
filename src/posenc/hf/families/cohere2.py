"""Cohere2: RoPE on the sliding layers only, the full ones NoPE; sliding and full by
``sliding_window_pattern`` when a ``config.json`` has no ``layer_types``."""

from __future__ import annotations

from collections.abc import Callable

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import FULL, SLIDING, Family, layer_types, one_rope, pattern, read_window

__all__ = ["FAMILY", "rope_on_sliding"]

#: layer ``i`` full when ``(i + 1) % sliding_window_pattern == 0``
DERIVE = pattern("sliding_window_pattern", first_full=False)


def rope_on_sliding(
    keys: ConfigKeys, layout: str | None, derive: Callable[[ConfigKeys], list[str]] | None
) -> list[LayerSpec]:
    """The window and the one RoPE on the sliding layers, NoPE on the full ones (the
    attention rotates only where it has a window), the types derived by ``derive`` where
    the config has none (None: it must give them)."""
    types = layer_types(keys, (FULL, SLIDING), derive)
    window = read_window(keys, types)
    rope = one_rope(keys, layout)
    return [LayerSpec(rope, window=window) if t == SLIDING else LayerSpec(None) for t in types]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    return rope_on_sliding(keys, layout, DERIVE)


FAMILY = Family(read)
