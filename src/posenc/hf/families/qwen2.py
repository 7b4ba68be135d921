"""Qwen2 and Qwen3: sliding from layer ``max_window_layers`` on when ``use_sliding_window``
(their config classes derive ``layer_types`` so)."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import FULL, SLIDING, Family, layer_types, one_rope, qwen_window, read_window

__all__ = ["FAMILY"]


def derive(keys: ConfigKeys) -> list[str]:
    """Sliding from layer ``max_window_layers`` on when ``use_sliding_window`` (Qwen2, Qwen3)."""
    window = qwen_window(keys)
    first = None
    if window is not None:
        first = keys.need("max_window_layers", "sets the first sliding layer")
        if isinstance(first, bool) or not isinstance(first, int):
            raise ValueError(f"max_window_layers must be an int, got {first!r}")
    return [SLIDING if first is not None and i >= first else FULL for i in range(keys.n_layers())]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING), derive)
    if SLIDING in types and not keys.need("use_sliding_window", "turns the window on"):
        raise ValueError(
            "layer_types has sliding_attention layers but use_sliding_window is False: "
            "transformers' config then sets sliding_window to None, for which its mask raises"
        )
    window, rope = read_window(keys, types, read=qwen_window), one_rope(keys, layout)
    return [LayerSpec(rope, window=window if t == SLIDING else None) for t in types]


FAMILY = Family(read)
