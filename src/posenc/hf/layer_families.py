"""How each Hugging Face family's layers read as :class:`~posenc.models.spec.LayerSpec`
records: one reader per family, from transformers 5.24's modeling code (the attention
module's window, rope and sinks; the mask ``masking_utils`` builds for each layer type),
and :data:`FAMILIES`, the table :func:`~posenc.hf.layer_plan.layer_plan` asks.

A reader takes the config's keys (:class:`~posenc.hf.layer_types.ConfigKeys`) and the pair
layout given for the RoPE, and returns one spec per layer or raises a ValueError that names
the key it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..attn.temperature import QueryTemperature
from ..config import check_float
from ..models.spec import LayerSpec
from ..rotary.rope import RoPE
from .keys import COMPOSITE_TEXT, config_rope_dict, nested_rope_keys, rope_base_keys
from .layer_types import CHUNKED, FULL, SLIDING, ConfigKeys, count, layer_types, qwen_window
from .layer_types import rope_flags as _rope_flags
from .rope import rope_from_hf_config

__all__ = ["COMPOSITE", "FAMILIES", "Family"]

Reader = Callable[[ConfigKeys, "str | None"], list[LayerSpec]]


def _window(
    keys: ConfigKeys,
    types: list[str],
    key: str = "sliding_window",
    read: Callable[[ConfigKeys], Any] | None = None,
) -> int | None:
    """The window of the sliding layers (``key``, or what ``read`` returns), checked where
    ``types`` has one; None, and nothing read, where it has none."""
    if SLIDING not in types:
        return None
    value = keys.need(key, "is the window of the sliding layers") if read is None else read(keys)
    if value is None:
        raise ValueError(
            f"layer_types has sliding_attention layers but {key} is None: transformers' "
            "create_sliding_window_causal_mask raises for that config"
        )
    return count(key, value)


def _one_rope(keys: ConfigKeys, layout: str | None) -> RoPE:
    """The family's one RoPE; a ``config.json`` must give its base (the config classes'
    defaults differ: Llama 4's is 500,000, SmolLM3's 2,000,000)."""
    if keys.is_dict and "rope_theta" not in rope_base_keys(keys.get, config_rope_dict(keys.get)):
        keys.need("rope_theta", "is the RoPE base (not in rope_parameters either)")
    return rope_from_hf_config(keys.config, layout=layout)


def _mistral(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    if keys.get("layer_types") is not None:
        raise ValueError(
            f"model_type {keys.model_type!r} with layer_types: transformers' model ignores "
            "them (one mask for every layer, from sliding_window); drop layer_types, or use "
            "model_type 'ministral' for alternating layers"
        )
    window = keys.need("sliding_window", "is every layer's window")
    window = None if window is None else count("sliding_window", window)
    return [LayerSpec(_one_rope(keys, layout), window=window)] * keys.n_layers()


def _qwen2(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING))
    if SLIDING in types and not keys.need("use_sliding_window", "turns the window on"):
        raise ValueError(
            "layer_types has sliding_attention layers but use_sliding_window is False: "
            "transformers' config then sets sliding_window to None, for which its mask raises"
        )
    window, rope = _window(keys, types, read=qwen_window), _one_rope(keys, layout)
    return [LayerSpec(rope, window=window if t == SLIDING else None) for t in types]


def _causal_only(keys: ConfigKeys) -> None:
    if keys.get("use_bidirectional_attention"):
        raise ValueError(
            "use_bidirectional_attention=True: transformers' Gemma then lets sliding layers "
            "see both ways and full ones everything (EmbeddingGemma), which posenc does not read"
        )


def _gemma2(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    _causal_only(keys)
    types = layer_types(keys, (FULL, SLIDING))
    window = _window(keys, types)
    softcap = keys.need("attn_logit_softcapping", "caps every layer's scores")
    rope = _one_rope(keys, layout)
    return [
        LayerSpec(rope, window=window if t == SLIDING else None, softcap=softcap) for t in types
    ]


def _gemma3(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    _causal_only(keys)
    if keys.get("attn_logit_softcapping") is not None:
        raise ValueError(
            f"attn_logit_softcapping={keys.get('attn_logit_softcapping')!r}: transformers' "
            "Gemma3Attention never passes it to the attention (its scores are not capped); "
            "posenc does not guess which was meant: set it to None"
        )
    types = layer_types(keys, (FULL, SLIDING))
    window = _window(keys, types)
    thetas = {FULL: "rope_theta", SLIDING: "rope_local_base_freq"}
    ropes = _per_type_ropes(keys, layout, types, thetas)
    return [LayerSpec(ropes[t], window=window if t == SLIDING else None) for t in types]


def _cohere2(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING))
    window = _window(keys, types)
    rope = _one_rope(keys, layout)  # Cohere2Attention rotates only where it has a window
    return [LayerSpec(rope, window=window) if t == SLIDING else LayerSpec(None) for t in types]


def _gpt_oss(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    if keys.get("rope_parameters") is None and keys.get("rope_scaling") is None:
        raise ValueError(
            "a gpt_oss config without rope_parameters: transformers' GptOssConfig fills in "
            "YaRN (factor 32) then, which posenc does not assume: give rope_parameters"
        )
    types = layer_types(keys, (FULL, SLIDING))
    window = _window(keys, types)
    rope = _one_rope(keys, layout)
    return [LayerSpec(rope, window=window if t == SLIDING else None, sinks=True) for t in types]


def _llama4(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, CHUNKED))
    rotates = _rope_flags(keys, empty_is_default=True)
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
        _positive("attn_scale", scale)
        temperature = QueryTemperature(floor, float(scale))
    rope = _one_rope(keys, layout) if any(rotates) else None
    return [
        LayerSpec(
            rope if r else None,
            chunk=chunk if t == CHUNKED else None,
            temperature=None if r else temperature,
        )
        for t, r in zip(types, rotates, strict=True)
    ]


def _smollm3(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING))
    rotates = _rope_flags(keys, empty_is_default=False)
    window = _window(keys, types)
    if window is not None and not keys.need("use_sliding_window", "turns the window on"):
        raise ValueError(
            "layer_types has sliding_attention layers but use_sliding_window is False: "
            "transformers' SmolLM3 masks them with sliding_window under eager and SDPA "
            "attention but not under flash attention; set use_sliding_window or the types"
        )
    rope = _one_rope(keys, layout) if any(rotates) else None
    return [
        LayerSpec(rope if r else None, window=window if t == SLIDING else None)
        for t, r in zip(types, rotates, strict=True)
    ]


def _sliding_full(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    """Sliding and full layers by ``layer_types``, the window on the sliding ones, every
    layer rotating with the one RoPE or with its layer type's (``rope_parameters`` per
    layer type: OLMo 3): the families whose attention reads no more than that."""
    if keys.get("layer_types") is None:
        keys.need("layer_types", "says which layers slide (the config class derives it)")
    types = layer_types(keys, (FULL, SLIDING))
    window = _window(keys, types)
    if nested_rope_keys(keys.get("rope_parameters") or {}):
        each = dict.fromkeys(types)  # one RoPE per layer type, shared by its layers
        ropes = {t: rope_from_hf_config(keys.config, layout=layout, layer_type=t) for t in each}
    else:
        ropes = dict.fromkeys(types, _one_rope(keys, layout))
    return [LayerSpec(ropes[t], window=window if t == SLIDING else None) for t in types]


def _exaone4(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    """EXAONE 4: RoPE on the sliding layers only (NoPE global ones) when there is a window."""
    specs, windowed = _sliding_full(keys, layout), keys.get("sliding_window") is not None
    return [LayerSpec(None) if windowed and s.window is None else s for s in specs]


def _modernbert(keys: ConfigKeys, layout: str | None) -> list[LayerSpec]:
    types = layer_types(keys, (FULL, SLIDING))
    window = _window(keys, types, "local_attention")
    thetas = {FULL: "global_rope_theta", SLIDING: "local_rope_theta"}
    ropes = _per_type_ropes(keys, layout, types, thetas, scaled=(FULL, SLIDING))
    return [LayerSpec(ropes[t], window=window if t == SLIDING else None) for t in types]


def _per_type_ropes(
    keys: ConfigKeys,
    layout: str | None,
    types: list[str],
    theta_keys: dict[str, str],
    scaled: tuple[str, ...] = (FULL,),
) -> dict[str, RoPE]:
    """The RoPE of each layer type in ``types``, from ``rope_parameters[layer_type]``, as
    the family's rotary embedding reads it; a ``config.json`` whose dict is not nested (an
    old one) nested as its config class nests it: the legacy ``rope_scaling`` on the
    ``scaled`` types, the base from ``theta_keys[type]``."""
    theta_keys = {t: key for t, key in theta_keys.items() if t in types}
    config = keys.config
    if keys.is_dict:
        nested = _nest(keys, theta_keys, scaled)
        config = {**config, "rope_parameters": nested, "rope_scaling": None}
    elif not nested_rope_keys(keys.get("rope_parameters") or {}):
        params = keys.get("rope_parameters")
        raise ValueError(f"rope_parameters must be nested by layer type, got {params}")
    return {t: rope_from_hf_config(config, layout=layout, layer_type=t) for t in theta_keys}


def _nest(keys: ConfigKeys, theta_keys: dict[str, str], scaled: tuple[str, ...]) -> dict:
    params, scaling = keys.get("rope_parameters"), keys.get("rope_scaling")
    nested = nested_rope_keys(params) if isinstance(params, Mapping) else []
    if params is not None and not nested:
        raise ValueError(
            f"a flat rope_parameters {dict(params)}: transformers' {keys.model_type!r} config "
            "ignores it (it reads one dict per layer type); nest it by layer type, or give the "
            "legacy rope_scaling"
        )
    if nested and scaling is not None:
        raise ValueError("the config has both per-layer-type rope_parameters and rope_scaling")
    out = {t: dict(params[t]) for t in nested} if params is not None else {}
    for layer_type, theta_key in theta_keys.items():
        entry = out.setdefault(layer_type, {"rope_type": "default"})
        if scaling is not None and layer_type in scaled:
            entry.update(scaling)
        if "rope_theta" not in entry:
            entry["rope_theta"] = keys.need(theta_key, f"is the RoPE base of {layer_type} layers")
    return out


def _positive(key: str, value: Any) -> None:
    try:
        check_float(key, value)
    except TypeError as e:
        raise ValueError(str(e)) from e


@dataclass(frozen=True)
class Family:
    """A family's reader, whether its attention is causal, the key whose ``-1/2`` power
    scales its scores (None: ``head_dim``'s), and the keys a ``config.json`` must give."""

    read: Reader
    causal: bool = True
    scale_key: str | None = None
    #: keys a ``config.json`` must give: its class's default is not derived from others
    required: tuple[str, ...] = ()


#: the classes whose head_dim defaults to a number (Gemma's 256), not hidden / heads
_HEAD_DIM = ("head_dim",)

#: model_type -> how its layers read
FAMILIES = {
    "mistral": Family(_mistral),
    "mixtral": Family(_mistral),
    "qwen2": Family(_qwen2),
    "qwen3": Family(_qwen2, required=_HEAD_DIM),
    "gemma2": Family(_gemma2, scale_key="query_pre_attn_scalar", required=_HEAD_DIM),
    "gemma3_text": Family(_gemma3, scale_key="query_pre_attn_scalar", required=_HEAD_DIM),
    "cohere2": Family(_cohere2),
    "gpt_oss": Family(_gpt_oss, required=_HEAD_DIM),
    "llama4_text": Family(_llama4, required=_HEAD_DIM),
    "smollm3": Family(_smollm3),
    "modernbert": Family(_modernbert, causal=False),
    "olmo3": Family(_sliding_full),
    "ministral": Family(_sliding_full),
    "afmoe": Family(_cohere2, required=_HEAD_DIM),
    "cwm": Family(_sliding_full, required=_HEAD_DIM),
    "mellum": Family(_sliding_full, required=_HEAD_DIM),
    "laguna": Family(_sliding_full, required=_HEAD_DIM),
    "exaone4": Family(_exaone4),
    "exaone_moe": Family(_exaone4),
    "kolibri1": Family(_exaone4, required=_HEAD_DIM),
}
#: composite configs: their language model's config, which the plan is read from
COMPOSITE = COMPOSITE_TEXT
