"""Extending a loaded Hugging Face model's context: :func:`extend_context`.

A published RoPE scaling written into the model's config, and its rotary embedding rebuilt
from it, so the model is the one transformers would load with that config (position
interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3.1). Needs transformers >= 5
(``config.rope_parameters``); transformers itself is never imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..config import MAX_INT, check_float
from ..functional.rope_scaling import ntk_base
from ..rotary.rope import DEFAULT_BASE
from ..rotary.scaling import parse_scaling
from .keys import (
    FULL,
    Getter,
    config_getter,
    config_head_dim,
    config_rope_dict,
    nested_rope_keys,
    rope_base_keys,
)

__all__ = ["EXTEND_METHODS", "extend_context", "scaled_layer_type"]

#: the scalings :func:`extend_context` can apply
EXTEND_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")

#: rope types that are unscaled RoPE: Qwen2-VL's legacy ``"mrope"`` is default frequencies
#: in sections, as :func:`~posenc.hf.rope_from_hf_config` reads it
_UNSCALED = ("default", "mrope")

#: rope_parameters keys carried over unchanged (M-RoPE's sections)
_CARRIED = ("mrope_section", "mrope_interleaved")

#: rope_parameters keys that extend_context sets from its own arguments and the model
_SET_BY_EXTEND = (
    "rope_type",
    "type",
    "factor",
    "original_max_position_embeddings",
    "rope_theta",
    "partial_rotary_factor",
)


def _check_factor(factor: Any) -> float:
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise ValueError(f"factor must be a number > 1, got {factor!r}")
    if not math.isfinite(factor) or factor <= 1:
        raise ValueError(
            f"factor must be a finite number > 1 (the context grows by it), got {factor}"
        )
    check_float("factor", factor)  # the bound every configured number has
    return float(factor)


def extension_updates(
    config: Any,
    method: str,
    factor: float,
    original_max_position_embeddings: int | None = None,
    **params: Any,
) -> dict[str, Any]:
    """The config keys :func:`extend_context` sets, computed from the config alone.

    The pure part of :func:`extend_context` (which calls it, so the two cannot disagree):
    what ``extend_context(model, method, factor, ...)`` would write into ``model.config``,
    from the config object or its ``config.json`` dict, without a model. Per-layer-type
    ``rope_parameters`` (Gemma 3, OLMo 3) get their ``full_attention`` entry scaled and the
    others kept, as those models' own recipes scale only their full-attention layers.
    Arguments and errors as :func:`extend_context`'s. The base and rotary fraction are read as
    :func:`~posenc.hf.rope_from_hf_config` reads them (GPT-NeoX's legacy names included);
    Qwen2-VL's legacy ``"mrope"`` type counts as unscaled, its ``mrope_section`` kept.

    Returns:
        ``{"rope_parameters": {...}, "max_position_embeddings": int}``, plus
        ``original_max_position_embeddings`` when the config has that key at the top level
        (Phi-3), in the order they are set.

    Example:
        >>> extension_updates({"max_position_embeddings": 4096, "rope_theta": 1e4}, "yarn", 4)
        {'rope_parameters': {'rope_theta': 10000.0, 'rope_type': 'yarn', 'factor': 4.0, \
'original_max_position_embeddings': 4096}, 'max_position_embeddings': 16384}
    """
    if method not in EXTEND_METHODS:
        raise ValueError(f"unknown method {method!r}; accepted: {list(EXTEND_METHODS)}")
    factor = _check_factor(factor)
    get = config_getter(config)
    layer_type = scaled_layer_type(get)
    current = config_rope_dict(get, layer_type)
    if current.get("rope_type", current.get("type", "default")) not in _UNSCALED:
        raise ValueError(
            f"the model already uses {current.get('rope_type', current.get('type'))!r} "
            "scaling; extend_context starts from an unscaled model (rope_type 'default')"
        )
    reserved = sorted(set(params) & set(_SET_BY_EXTEND))
    if reserved:
        raise ValueError(f"{reserved} are set by extend_context itself, not through **params")

    original = original_max_position_embeddings
    if original is None:
        original = get("max_position_embeddings")
    if isinstance(original, bool) or not isinstance(original, int) or not 1 <= original <= MAX_INT:
        raise ValueError(
            f"original_max_position_embeddings must be an int in [1, {MAX_INT}], got {original!r}"
        )
    keep = rope_base_keys(get, current)  # base and rotary fraction, as rope_from_hf_config
    keep.update({key: current[key] for key in _CARRIED if key in current})
    base = keep.setdefault("rope_theta", DEFAULT_BASE)
    new_max = int(original * factor)

    new: dict[str, Any]
    if method == "ntk":
        parse_scaling({"rope_type": "ntk", "factor": factor, **params})  # rejects any params
        head_dim = config_head_dim(get)
        rotary_dim = int(head_dim * keep.get("partial_rotary_factor", 1.0))
        new = {**keep, "rope_type": "default", "rope_theta": ntk_base(base, factor, rotary_dim)}
    else:
        new = {**keep, "rope_type": method, "factor": factor}
        if method == "dynamic":
            new_max = original  # transformers' dynamic scaling starts past this length
        elif method in ("yarn", "llama3"):
            new["original_max_position_embeddings"] = original
        if method == "llama3":
            new.update(low_freq_factor=1.0, high_freq_factor=4.0)
        new.update(params)
        checked = {k: v for k, v in new.items() if k not in _CARRIED}  # not scaling keys
        if method == "dynamic":
            checked["original_max_position_embeddings"] = original
        parse_scaling(checked)  # strict: unknown keys and bad values raise, naming them

    if layer_type is not None:  # the other layer types' RoPE as it was
        new = {**{k: dict(v) for k, v in get("rope_parameters").items()}, layer_type: new}
    updates: dict[str, Any] = {"rope_parameters": new, "max_position_embeddings": new_max}
    if get("original_max_position_embeddings") is not None:
        # transformers prefers this top-level key (Phi-3) over the one in rope_parameters
        updates["original_max_position_embeddings"] = original
    return updates


def scaled_layer_type(get: Getter) -> str | None:
    """The layer type whose RoPE an extension scales in per-layer-type ``rope_parameters``
    (Gemma 3, ModernBERT, OLMo 3): the full-attention layers, as these models' own long
    context recipes do (Gemma 3's 128k: linear 8 on its global layers; OLMo 3: YaRN on its
    full layers); a sliding layer sees its window only. None for one RoPE on every layer."""
    params = get("rope_parameters")
    nested = nested_rope_keys(params) if isinstance(params, Mapping) else []
    if not nested:
        return None
    if FULL not in nested:
        raise ValueError(
            f"per-layer rope_parameters {nested} have no {FULL!r} entry: extend_context "
            "scales the full-attention layers' RoPE and would not pick another"
        )
    return FULL


def extend_context(
    model: Any,
    method: str,
    factor: float,
    original_max_position_embeddings: int | None = None,
    **params: Any,
) -> Any:
    """Extend a loaded Hugging Face causal LM (Llama family) to a ``factor`` times longer context.

    Sets ``model.config.rope_parameters`` and ``max_position_embeddings`` and rebuilds
    ``model.model.rotary_emb`` from the updated config, on the device of the old one (its
    frequency buffers float32, as ``from_pretrained`` builds them). The model then gives the
    same logits as the same weights loaded with that config. No weight changes: the
    scalings that want fine-tuning (PI, YaRN) still want it. How each method is written in
    ``rope_parameters``, and why: ``docs/design-notes.md``, "Extending a loaded model".

    Args:
        model: a transformers causal LM with ``model.config`` and ``model.model.rotary_emb``
            (Llama, Mistral, Qwen2, ...), whose RoPE is not scaled yet (``rope_type``
            ``default``).
        method: one of :data:`EXTEND_METHODS`: ``linear`` (position interpolation, Chen et
            al. 2023, arXiv:2306.15595), ``ntk`` (NTK-aware, bloc97 2023), ``dynamic``
            (dynamic NTK), ``yarn`` (Peng et al. 2023, arXiv:2309.00071), ``llama3``
            (Llama 3.1's scaling, low_freq_factor 1 and high_freq_factor 4 unless given).
        factor: how many times longer the context becomes (> 1); ``max_position_embeddings``
            becomes ``int(original * factor)`` for every method but ``dynamic``.
        original_max_position_embeddings: the trained context length; default the config's
            ``max_position_embeddings``.
        **params: further keys of the scaling (``beta_fast``, ``beta_slow``,
            ``attention_factor``, ``mscale``, ``mscale_all_dim``, ``truncate`` for yarn;
            ``low_freq_factor``, ``high_freq_factor`` for llama3), validated by posenc.

    Returns:
        the same ``model``, updated in place.

    Shapes:
        the rebuilt ``rotary_emb(x, position_ids [batch, seq])`` returns cos, sin
        ``[batch, seq, head_dim]``, as before.

    Raises:
        ValueError: an unknown method or key, a factor that is not a number > 1, a model
            without ``model.model.rotary_emb`` or already scaled.
    """
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    rotary = getattr(inner, "rotary_emb", None)
    if config is None or inner is None or rotary is None:
        raise ValueError(
            "extend_context expects a Hugging Face causal LM of the Llama family "
            f"(model.config and model.model.rotary_emb), got {type(model).__name__}"
        )
    if not hasattr(config, "rope_parameters"):
        raise ValueError("extend_context needs transformers >= 5 (config.rope_parameters)")
    updates = extension_updates(config, method, factor, original_max_position_embeddings, **params)
    for key, value in updates.items():
        setattr(config, key, value)
    device = next((b.device for b in rotary.buffers()), None)
    rebuilt = type(rotary)(config=config)
    inner.rotary_emb = rebuilt if device is None else rebuilt.to(device)
    return model
