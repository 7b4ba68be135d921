"""SmolLM3: NoPE where ``no_rope_layers`` is 0; sliding on the NoPE layers when
``use_sliding_window`` and ``sliding_window`` are set."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys
from .common import FULL, SLIDING, Family, layer_types, one_rope, read_window, rope_flags

__all__ = ["FAMILY"]


def derive(keys: ConfigKeys) -> list[str]:
    """Sliding on the NoPE layers when ``use_sliding_window`` and ``sliding_window`` are set."""
    rotates = rope_flags(keys, empty_is_default=False)
    use = keys.need("use_sliding_window", "says whether sliding_window is used")
    window = keys.need("sliding_window", "is the window of the sliding layers")
    on = bool(use) and window is not None
    return [SLIDING if on and not r else FULL for r in rotates]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING), derive)
    rotates = rope_flags(keys, empty_is_default=False)
    window = read_window(keys, types)
    if window is not None and not keys.need("use_sliding_window", "turns the window on"):
        raise ValueError(
            "layer_types has sliding_attention layers but use_sliding_window is False: "
            "transformers' SmolLM3 masks them with sliding_window under eager and SDPA "
            "attention but not under flash attention; set use_sliding_window or the types"
        )
    rope = one_rope(keys, layout) if any(rotates) else None
    return [
        LayerSpec(rope if r else None, window=window if t == SLIDING else None)
        for t, r in zip(types, rotates, strict=True)
    ]


FAMILY = Family(read)
