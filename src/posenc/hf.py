"""Hugging Face interop: read a model's RoPE from its config, extend a loaded model's context.

:func:`rope_from_hf_config` turns a transformers config (the object or its ``config.json``
dict) into the :class:`~posenc.rotary.RoPE` that reproduces the model's rotary embedding:
the same frequencies and attention factor that transformers computes, filled in from the
top-level keys transformers reads for them. :func:`extend_context` rewrites a loaded causal
LM (Llama family) for a longer context with one of the published scalings.

transformers is optional: nothing here imports it, so ``import posenc.hf`` works without it.
Both functions duck-type the config and the model; :func:`extend_context` needs
transformers >= 5 (``config.rope_parameters``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .config import MAX_INT, check_float, check_int
from .functional.rope_scaling import ROPE_SCALINGS, ntk_base
from .rotary.layouts import permute_for_layout
from .rotary.mrope import MRoPE
from .rotary.rope import DEFAULT_BASE, RoPE
from .rotary.scaling import parse_scaling

__all__ = ["EXTEND_METHODS", "extend_context", "permute_for_layout", "rope_from_hf_config"]

#: the scalings :func:`extend_context` can apply
EXTEND_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")

#: scalings whose original context length transformers reads from a top-level
#: ``original_max_position_embeddings`` when the config has one (Phi-3), else from
#: ``rope_parameters``, else from ``max_position_embeddings``
_ORIGINAL_FROM_CONFIG = ("yarn", "llama3", "longrope")

#: Multi-head latent attention models: the rotary part of each head is ``qk_rope_head_dim``
#: and the rotary pairs are interleaved (2i, 2i + 1) in the q/k projection weights
_INTERLEAVED_MODEL_TYPES = ("deepseek_v2", "deepseek_v3")

#: M-RoPE models (the composite config and its text config): model_type -> (whether the
#: sections interleave, the mrope_section transformers uses when the config has none)
_MROPE_MODEL_TYPES = {
    f"{name}{suffix}": layout
    for name, layout in (
        ("qwen2_vl", (False, (16, 24, 24))),
        ("qwen2_5_vl", (False, (16, 24, 24))),
        ("qwen3_vl", (True, (24, 20, 20))),
        ("qwen3_vl_moe", (True, (24, 20, 20))),
    )
    for suffix in ("", "_text")
}

#: rope_parameters keys that extend_context sets from its own arguments and the model
_SET_BY_EXTEND = (
    "rope_type",
    "type",
    "factor",
    "original_max_position_embeddings",
    "rope_theta",
    "partial_rotary_factor",
)


def _getter(config: Any):
    if isinstance(config, Mapping):
        return config.get
    return lambda key, default=None: getattr(config, key, default)


def _head_dim(get) -> int:
    """The rotary head size: ``qk_rope_head_dim`` (MLA), ``head_dim``, or hidden / heads."""
    for key in ("qk_rope_head_dim", "head_dim"):
        if get(key) is not None:
            check_int(key, get(key))
            return get(key)
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError(
            "the config has neither head_dim nor hidden_size and num_attention_heads; "
            "cannot tell the head size"
        )
    check_int("hidden_size", hidden)
    check_int("num_attention_heads", heads)
    return hidden // heads


def _rope_dict(get) -> dict[str, Any]:
    """``rope_parameters`` (transformers 5) or the legacy ``rope_scaling``, None values dropped."""
    params, legacy = get("rope_parameters"), get("rope_scaling")
    if params is not None and legacy is not None and dict(params) != dict(legacy):
        raise ValueError(
            f"the config has both rope_parameters={dict(params)} and rope_scaling={dict(legacy)}"
        )
    params = params if params is not None else legacy
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValueError(f"rope_parameters must be a dict, got {params!r}")
    nested = [k for k, v in params.items() if isinstance(v, Mapping)]
    if nested:
        raise ValueError(
            f"per-layer rope_parameters (keys {nested}) are not supported: pass a config "
            "whose rope_parameters is one flat dict"
        )
    return {k: v for k, v in params.items() if v is not None}


def _mrope_keys(params: dict[str, Any], model_type: Any) -> dict[str, Any] | None:
    """Take M-RoPE's keys out of ``params``: the :class:`~posenc.rotary.MRoPE` keys for an
    M-RoPE model type, None for other models (which must not carry M-RoPE keys)."""
    legacy = [k for k in ("type", "rope_type") if params.get(k) == "mrope"]
    found = [k for k in ("mrope_section", "mrope_interleaved") if k in params] + [
        f"{k}='mrope'" for k in legacy
    ]
    if model_type not in _MROPE_MODEL_TYPES:
        if found:
            raise ValueError(
                f"M-RoPE keys {found} in a config of model_type {model_type!r}: posenc "
                f"reproduces the M-RoPE of model types {sorted(_MROPE_MODEL_TYPES)} only"
            )
        return None
    interleaved, default_section = _MROPE_MODEL_TYPES[model_type]
    for key in legacy:  # Qwen2-VL's legacy "mrope" type: default frequencies in sections
        params[key] = "default"
    section = params.pop("mrope_section", default_section)
    flag = params.pop("mrope_interleaved", interleaved)
    if flag != interleaved:
        raise ValueError(
            f"mrope_interleaved={flag!r} conflicts with model_type {model_type!r}, whose "
            f"transformers rotary embedding {'always' if interleaved else 'never'} interleaves"
        )
    return {"mrope_section": section, "mrope_interleaved": interleaved}


def rope_from_hf_config(config: Any) -> RoPE:
    """The posenc :class:`~posenc.rotary.RoPE` of a Hugging Face model, from its config.

    Reads what transformers reads: the head size (``head_dim``, else ``hidden_size //
    num_attention_heads``; ``qk_rope_head_dim`` for DeepSeek's multi-head latent
    attention), ``rope_parameters`` (transformers 5) or the legacy ``rope_scaling``, and the
    top-level ``rope_theta`` and ``partial_rotary_factor`` (the values inside the dict win,
    as in transformers). posenc's scaling records are strict, so the values transformers
    keeps outside the dict are filled in the way transformers uses them:

    - ``dynamic``: ``original_max_position_embeddings`` = ``max_position_embeddings``
      (transformers scales only past ``max_position_embeddings``; a different
      ``original_max_position_embeddings`` in the dict is ambiguous and raises);
    - ``yarn``, ``llama3``, ``longrope``: ``original_max_position_embeddings`` from the top
      level where the config has it (Phi-3), else from the dict, else
      ``max_position_embeddings``;
    - ``yarn``, ``longrope`` without ``factor``: ``max_position_embeddings /
      original_max_position_embeddings``;
    - Phi-3's old names ``su`` and ``yarn`` for LongRoPE become ``longrope``, as in
      transformers' Phi-3 config.

    Multimodal models with M-RoPE (``model_type`` ``qwen2_vl``, ``qwen2_5_vl``: sections;
    ``qwen3_vl``, ``qwen3_vl_moe``: interleaved; composite configs are read from their
    ``text_config``) give an :class:`~posenc.rotary.MRoPE` with the config's
    ``mrope_section``, or transformers' default for the model when it has none
    ([16, 24, 24], Qwen3-VL [24, 20, 20]); the legacy rope type ``mrope`` is the default
    frequencies. It takes the ``[3, batch, seq]`` position ids of
    :func:`posenc.positions.multimodal`.

    Keys set to None count as absent. Anything posenc does not know (a rope type such as
    ``ntk-by-parts``, M-RoPE keys in another model, per-layer dicts) raises ``ValueError``
    naming it, never silently dropped.

    The layout is ``"half"`` (pairs i, i + d/2), as in every Hugging Face Llama-family
    model (Llama, Mistral, Qwen2, Phi-3, Gemma, ...), whose conversion scripts permute
    Meta's interleaved q/k weights into it. The exception is DeepSeek-V2/V3
    (``model_type`` ``deepseek_v2``/``deepseek_v3``, unless ``rope_interleave`` is false),
    whose weights keep the interleaved pairs (2i, 2i + 1): the layout is ``"interleaved"``.
    DeepSeek's attention also multiplies its softmax scale by yarn_mscale(factor,
    mscale_all_dim)²; that is part of the attention, not of the RoPE, and is not returned.

    Args:
        config: a transformers config object, or its ``config.json`` contents as a dict.

    Returns:
        a :class:`~posenc.rotary.RoPE` whose ``inv_freq(seq_len)`` and
        ``attention_factor(seq_len)`` equal transformers' rotary embedding for that config.

    Shapes:
        the returned module rotates q ``[batch, heads, seq, head_dim]`` and k ``[batch,
        kv_heads, seq, head_dim]`` at positions ``[seq]`` or ``[batch, seq]``.

    Example:
        >>> rope = rope_from_hf_config({"hidden_size": 4096, "num_attention_heads": 32,
        ...     "max_position_embeddings": 131072, "rope_theta": 500000.0,
        ...     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
        >>> rope.head_dim, rope.config.base, rope.scaling.rope_type, rope.config.layout
        (128, 500000.0, 'llama3', 'half')
    """
    get = _getter(config)
    model_type = get("model_type")
    if model_type in _MROPE_MODEL_TYPES and get("text_config") is not None:
        get = _getter(get("text_config"))  # a vision-language config: its language model's
    head_dim = _head_dim(get)
    params = _rope_dict(get)
    mrope = _mrope_keys(params, model_type)

    if "type" in params:  # the legacy name of rope_type
        legacy = params.pop("type")
        if params.setdefault("rope_type", legacy) != legacy:
            raise ValueError(
                f"rope_parameters has type={legacy!r} and rope_type={params['rope_type']!r}"
            )
    rope_type = params.setdefault("rope_type", "default")
    if model_type == "phi3" and rope_type in ("su", "yarn"):
        rope_type = params["rope_type"] = "longrope"
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"unknown rope_type {rope_type!r}; accepted: {sorted(ROPE_SCALINGS)}")

    for key in ("rope_theta", "partial_rotary_factor"):
        if key not in params and get(key) is not None:
            params[key] = get(key)
        if key in params:  # named as the config names it (RoPE calls rope_theta base)
            check_float(key, params[key])

    max_positions = get("max_position_embeddings")

    def need_max_positions() -> int:
        if max_positions is None:
            raise ValueError(f"{rope_type!r} scaling needs the config's max_position_embeddings")
        check_int("max_position_embeddings", max_positions)
        return max_positions

    original_key = "original_max_position_embeddings"
    if rope_type == "dynamic":
        original = need_max_positions()
        if params.get(original_key, original) != original:
            raise ValueError(
                f"dynamic scaling: transformers uses max_position_embeddings={original} as the "
                f"original length, but rope_parameters has {original_key}={params[original_key]}"
            )
        params[original_key] = original
    elif rope_type in _ORIGINAL_FROM_CONFIG:
        if get(original_key) is not None:
            params[original_key] = get(original_key)
        elif original_key not in params:
            params[original_key] = need_max_positions()
        check_int(original_key, params[original_key])
        if rope_type in ("yarn", "longrope") and "factor" not in params:
            params["factor"] = need_max_positions() / params[original_key]

    if mrope is not None:
        return MRoPE(head_dim=head_dim, scaling=params, **mrope)
    interleaved = model_type in _INTERLEAVED_MODEL_TYPES and get("rope_interleave", True)
    return RoPE(head_dim=head_dim, scaling=params, layout="interleaved" if interleaved else "half")


def _check_factor(factor: Any) -> float:
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise ValueError(f"factor must be a number > 1, got {factor!r}")
    if not math.isfinite(factor) or factor <= 1:
        raise ValueError(
            f"factor must be a finite number > 1 (the context grows by it), got {factor}"
        )
    check_float("factor", factor)  # the bound every configured number has
    return float(factor)


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
    frequency buffers stay float32, as ``from_pretrained`` builds them, even if the old
    ones were rounded by ``model.to(torch.bfloat16)``). The model then gives the same logits
    as the same weights loaded with that config. No weight changes: the scalings that want
    fine-tuning (PI, YaRN) still want it.

    ===========  ==================================================================
    ``linear``   position interpolation (Chen et al. 2023, arXiv:2306.15595):
                 ``{"rope_type": "linear", "factor": factor}``
    ``ntk``      NTK-aware (bloc97, 2023). Not a transformers rope type: realised as
                 ``{"rope_type": "default", "rope_theta": base · factor^(d/(d-2))}``
                 (d the rotary dimension), which is the same rotation exactly
    ``dynamic``  dynamic NTK (transformers ``dynamic``): ``{"rope_type": "dynamic",
                 "factor": factor}``; transformers reads ``max_position_embeddings`` as
                 the original length of this scaling, so it stays at the original length
    ``yarn``     YaRN (Peng et al. 2023, arXiv:2309.00071), defaults beta_fast 32,
                 beta_slow 1, attention factor 0.1·ln(factor) + 1
    ``llama3``   Llama 3.1's scaling, low_freq_factor 1 and high_freq_factor 4 (Meta's
                 values) unless given
    ===========  ==================================================================

    For every method but ``dynamic``, ``max_position_embeddings`` becomes
    ``int(original * factor)``.

    Args:
        model: a transformers causal LM with ``model.config`` and ``model.model.rotary_emb``
            (Llama, Mistral, Qwen2, ...), whose RoPE is not scaled yet (``rope_type``
            ``default``).
        method: one of :data:`EXTEND_METHODS`.
        factor: how many times longer the context becomes (> 1).
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
    if method not in EXTEND_METHODS:
        raise ValueError(f"unknown method {method!r}; accepted: {list(EXTEND_METHODS)}")
    factor = _check_factor(factor)
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
    current = _rope_dict(_getter(config))
    if current.get("rope_type", current.get("type", "default")) != "default":
        raise ValueError(
            f"the model already uses {current.get('rope_type', current.get('type'))!r} "
            "scaling; extend_context starts from an unscaled model (rope_type 'default')"
        )
    reserved = sorted(set(params) & set(_SET_BY_EXTEND))
    if reserved:
        raise ValueError(f"{reserved} are set by extend_context itself, not through **params")

    original = original_max_position_embeddings
    if original is None:
        original = config.max_position_embeddings
    if isinstance(original, bool) or not isinstance(original, int) or not 1 <= original <= MAX_INT:
        raise ValueError(
            f"original_max_position_embeddings must be an int in [1, {MAX_INT}], got {original!r}"
        )
    keep: dict[str, Any] = {
        k: current[k] for k in ("rope_theta", "partial_rotary_factor") if k in current
    }
    base = keep.setdefault("rope_theta", getattr(config, "rope_theta", None) or DEFAULT_BASE)
    new_max = int(original * factor)

    new: dict[str, Any]
    if method == "ntk":
        parse_scaling({"rope_type": "ntk", "factor": factor, **params})  # rejects any params
        head_dim = _head_dim(_getter(config))
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
        checked = dict(new)
        if method == "dynamic":
            checked["original_max_position_embeddings"] = original
        parse_scaling(checked)  # strict: unknown keys and bad values raise, naming them

    config.rope_parameters = new
    config.max_position_embeddings = new_max
    if getattr(config, "original_max_position_embeddings", None) is not None:
        # transformers prefers this top-level key (Phi-3) over the one in rope_parameters
        config.original_max_position_embeddings = original
    device = next((b.device for b in rotary.buffers()), None)
    rebuilt = type(rotary)(config=config)
    inner.rotary_emb = rebuilt if device is None else rebuilt.to(device)
    return model
