"""Mistral and Mixtral (transformers 5.24): ``sliding_window`` on every layer, or None."""

from __future__ import annotations

from ...models.spec import LayerSpec
from ..keys import ConfigKeys, count
from .common import Family, one_rope

__all__ = ["FAMILY"]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    if keys.get("layer_types") is not None:
        raise ValueError(
            f"model_type {keys.model_type!r} with layer_types: transformers' model ignores "
            "them (one mask for every layer, from sliding_window); drop layer_types, or use "
            "model_type 'ministral' for alternating layers"
        )
    window = keys.need("sliding_window", "is every layer's window")
    window = None if window is None else count("sliding_window", window)
    return [LayerSpec(one_rope(keys, layout), window=window)] * keys.n_layers()


FAMILY = Family(read)
