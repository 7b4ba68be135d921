"""Llama 4 text: NoPE where ``no_rope_layers`` is 0, with the query temperature
(``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``); ``attention_chunk_size``
on the ``chunked_attention`` layers (the RoPE ones when derived)."""

from __future__ import annotations

from ...attn.temperature import QueryTemperature
from ...models.spec import LayerSpec
from ..keys import ConfigKeys, count
from .common import CHUNKED, FULL, Family, layer_types, one_rope, positive, rope_flags

__all__ = ["FAMILY"]


def derive(keys: ConfigKeys) -> list[str]:
    """Chunked on the RoPE layers when ``attention_chunk_size`` is set."""
    rotates = rope_flags(keys, empty_is_default=True)
    chunk = keys.need("attention_chunk_size", "is the chunk of the RoPE layers")
    return [CHUNKED if r and chunk is not None else FULL for r in rotates]


def read(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, CHUNKED), derive)
    rotates = rope_flags(keys, empty_is_default=True)
    chunk = None
    if CHUNKED in types:
        chunk = keys.need("attention_chunk_size", "is the chunk of the chunked_attention layers")
        if chunk is None:
            raise ValueError(
                "layer_types has chunked_attention layers but attention_chunk_size is None: "
                "transformers' create_chunked_causal_mask raises for that config"
            )
        chunk = count("attention_chunk_size", chunk)
    temperature = None
    tuning = "says whether NoPE layers scale their queries"
    if not all(rotates) and keys.need("attn_temperature_tuning", tuning):
        floor = count("floor_scale", keys.need("floor_scale", "is the temperature's step"))
        scale = keys.need("attn_scale", "is the temperature's strength")
        positive("attn_scale", scale)
        temperature = QueryTemperature(floor, float(scale))
    rope = one_rope(keys, layout) if any(rotates) else None
    return [
        LayerSpec(
            rope if r else None,
            chunk=chunk if t == CHUNKED else None,
            temperature=None if r else temperature,
        )
        for t, r in zip(types, rotates, strict=True)
    ]


FAMILY = Family(read)
