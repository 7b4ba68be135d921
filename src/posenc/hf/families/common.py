"""What the layer-plan readers of :mod:`posenc.hf.families` share: each layer's attention
type (``layer_types``, or derived as the config class derives it), NoPE flags, windows,
the family's RoPE or one per layer type, and the :class:`Family` record each reader file
declares.

transformers' hybrid models index ``config.layer_types[i]`` (``"full_attention"``,
``"sliding_attention"``, ``"chunked_attention"``) to pick layer ``i``'s mask. A config
object always has it (its class derives it in ``__post_init__``); a ``config.json`` may
not, and then it is derived from the keys the class derives it from by the same rule. A key
a ``config.json`` lacks is an error that names it, never the default of the config class
assumed: that default is a fact of one transformers version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...config import check_float
from ...models.spec import LayerSpec
from ...rotary.rope import RoPE
from ..keys import (
    CHUNKED,
    FULL,
    SLIDING,
    ConfigKeys,
    config_rope_dict,
    count,
    nested_rope_keys,
    rope_base_keys,
)
from ..rope import rope_from_hf_config

__all__ = [
    "CHUNKED",
    "FULL",
    "SLIDING",
    "Family",
    "Reader",
    "alternate",
    "causal_only",
    "check_length",
    "layer_types",
    "nest",
    "one_rope",
    "pattern",
    "per_type_ropes",
    "positive",
    "qwen_window",
    "read_window",
    "rope_flags",
]

#: ``read(keys, layout) -> one spec per layer``
Reader = Callable[[ConfigKeys, "str | None"], list[LayerSpec]]


@dataclass(frozen=True)
class Family:
    """A family's reader, whether its attention is causal, and the key whose ``-1/2`` power
    scales its scores (None: ``head_dim``'s)."""

    read: Reader
    causal: bool = True
    scale_key: str | None = None


def rope_flags(keys: ConfigKeys, *, empty_is_default: bool) -> list[bool]:
    """Whether each layer rotates (``no_rope_layers``: 1 = RoPE, 0 = NoPE, as Llama 4 and
    SmolLM3 name it), or the default every ``no_rope_layer_interval``-th layer NoPE when it
    is None (Llama 4: also when empty, ``empty_is_default``)."""
    n = keys.n_layers()
    flags = keys.need("no_rope_layers", "says which layers rotate")
    if flags is None or (empty_is_default and not flags):
        why = "sets the NoPE layers when no_rope_layers is not given"
        every = count("no_rope_layer_interval", keys.need("no_rope_layer_interval", why))
        return [(i + 1) % every != 0 for i in range(n)]
    if isinstance(flags, (str, bytes)) or not isinstance(flags, Sequence) or len(flags) != n:
        raise ValueError(f"no_rope_layers must be a list of {n} flags (0 or 1), got {flags!r}")
    if any(f not in (0, 1) for f in flags):
        raise ValueError(f"no_rope_layers must hold 0 (NoPE) or 1 (RoPE), got {list(flags)}")
    return [bool(f) for f in flags]


def pattern(key: str, first_full: bool) -> Callable[[ConfigKeys], list[str]]:
    """Layer ``i`` full when ``(i + 1) % p == 0`` (``first_full``: when ``i % p == 0``),
    ``p`` the config's ``key``, as Gemma 3, Cohere2 and ModernBERT derive ``layer_types``."""

    def derive(keys: ConfigKeys) -> list[str]:
        p = count(key, keys.need(key, "sets the full layers when layer_types is not given"))
        shift = 0 if first_full else 1
        return [SLIDING if (i + shift) % p else FULL for i in range(keys.n_layers())]

    return derive


def alternate(keys: ConfigKeys) -> list[str]:
    """Even layers sliding, odd ones full (Gemma 2, gpt-oss)."""
    return [SLIDING if (i + 1) % 2 else FULL for i in range(keys.n_layers())]


def qwen_window(keys: ConfigKeys) -> int | None:
    """Qwen2/Qwen3's ``sliding_window``, None unless ``use_sliding_window`` (as their config
    class sets it)."""
    use = keys.need("use_sliding_window", "says whether sliding_window is used")
    return keys.need("sliding_window", "is the window of the sliding layers") if use else None


def check_length(types: Any, n: int) -> None:
    """Raise unless ``types`` is a list of ``n`` layer types (``num_hidden_layers``): every
    model type's ``layer_types`` is read by the layer's index."""
    if isinstance(types, (str, bytes)) or not isinstance(types, Sequence) or len(types) != n:
        raise ValueError(
            f"layer_types must be a list of {n} layer types (num_hidden_layers), got {types!r}"
        )


def layer_types(
    keys: ConfigKeys,
    allowed: tuple[str, ...],
    derive: Callable[[ConfigKeys], list[str]] | None = None,
) -> list[str]:
    """The config's ``layer_types`` (derived by ``derive``, the rule its config class
    follows, where it has none; a family without one needs them), one of ``allowed`` (the
    types the family's model builds a mask for) per layer."""
    n = keys.n_layers()
    types = keys.get("layer_types")
    if types is None:
        if derive is None:
            keys.need("layer_types", "says which layers slide (the config class derives it)")
        else:
            types = derive(keys)
    check_length(types, n)
    unknown = sorted({t for t in types if t not in allowed}, key=str)
    if unknown:
        raise ValueError(
            f"layer_types has {unknown}, for which transformers' {keys.model_type!r} model "
            f"builds no mask; it takes {list(allowed)}"
        )
    return list(types)


def read_window(
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


def one_rope(keys: ConfigKeys, layout: str | None) -> RoPE:
    """The family's one RoPE; a ``config.json`` must give its base (the config classes'
    defaults differ: Llama 4's is 500,000, SmolLM3's 2,000,000)."""
    if keys.is_dict and "rope_theta" not in rope_base_keys(keys.get, config_rope_dict(keys.get)):
        keys.need("rope_theta", "is the RoPE base (not in rope_parameters either)")
    return rope_from_hf_config(keys.config, layout=layout)


def causal_only(keys: ConfigKeys) -> None:
    if keys.get("use_bidirectional_attention"):
        raise ValueError(
            "use_bidirectional_attention=True: transformers' Gemma then lets sliding layers "
            "see both ways and full ones everything (EmbeddingGemma), which posenc does not read"
        )


def per_type_ropes(
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
        nested = nest(keys, theta_keys, scaled)
        config = {**config, "rope_parameters": nested, "rope_scaling": None}
    elif not nested_rope_keys(keys.get("rope_parameters") or {}):
        params = keys.get("rope_parameters")
        raise ValueError(f"rope_parameters must be nested by layer type, got {params}")
    return {t: rope_from_hf_config(config, layout=layout, layer_type=t) for t in theta_keys}


def nest(keys: ConfigKeys, theta_keys: dict[str, str], scaled: tuple[str, ...]) -> dict:
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


def positive(key: str, value: Any) -> None:
    try:
        check_float(key, value)
    except TypeError as e:
        raise ValueError(str(e)) from e
