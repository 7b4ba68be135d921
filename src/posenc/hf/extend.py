"""Extending a loaded Hugging Face model's context: :func:`extend_context`.

A published RoPE scaling written into the model's config, and its rotary embedding rebuilt
from it, so the model is the one transformers would load with that config (position
interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3.1). What it writes is what the model
type's config class takes (:attr:`~posenc.hf.records.ModelType.rope_types`), what
:func:`~posenc.hf.rope_from_hf_config` reads, and, for a loaded model, what its config class
saves and loads again; anything else is refused, naming why. Needs transformers >= 5
(``config.rope_parameters``); transformers itself is never imported.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from ..config import MAX_INT, check_float
from ..functional.rope_scaling import ntk_base
from ..rotary.rope import DEFAULT_BASE
from ..rotary.scaling import parse_scaling
from . import records
from .keys import (
    FULL,
    Getter,
    config_getter,
    config_head_dim,
    config_rope_dict,
    nested_rope_keys,
    rope_base_keys,
)
from .mrope import language_config, language_path
from .rescale import rescaled_rope
from .rope import rope_from_hf_config

__all__ = [
    "EXTEND_METHODS",
    "WRITTEN_ROPE_TYPE",
    "extend_context",
    "extend_refusal",
    "rope_type_refusal",
    "scaled_layer_type",
]

#: the scalings :func:`extend_context` can apply
EXTEND_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")

#: method -> the ``rope_type`` it writes (NTK-aware is the default type with a larger base)
WRITTEN_ROPE_TYPE = {
    "linear": "linear",
    "ntk": "default",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
}

#: the methods whose transformers initialisers read ``config.head_dim`` with no fallback to
#: hidden_size // num_attention_heads when it is None (as the default and linear ones have)
_READ_HEAD_DIM = ("dynamic", "yarn")

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

    Only what the model type's config class takes is written
    (:func:`rope_type_refusal`: Phi-3 takes no rope type but ``default`` and ``longrope``,
    so of these methods only ``ntk``), and only what :func:`~posenc.hf.rope_from_hf_config`
    reads (M-RoPE takes no ``dynamic``): anything else raises, naming why.

    Returns:
        ``{"rope_parameters": {...}, "max_position_embeddings": int}``, plus
        ``original_max_position_embeddings`` when the config has that key at the top level
        (Phi-3), and ``head_dim`` (hidden_size // num_attention_heads, as the attention
        uses) for ``dynamic`` and ``yarn`` when the config's is None (Mixtral: transformers'
        initialisers of those read it and fail on None), in the order they are set.

    Example:
        >>> config = {"model_type": "llama", "head_dim": 128, "max_position_embeddings": 4096,
        ...     "rope_theta": 1e4}
        >>> extension_updates(config, "yarn", 4)
        {'rope_parameters': {'rope_theta': 10000.0, 'rope_type': 'yarn', 'factor': 4.0, \
'original_max_position_embeddings': 4096}, 'max_position_embeddings': 16384}
    """
    if method not in EXTEND_METHODS:
        raise ValueError(f"unknown method {method!r}; accepted: {list(EXTEND_METHODS)}")
    factor = _check_factor(factor)
    get = config_getter(config)
    layer_type = scaled_layer_type(get)
    current = config_rope_dict(get, layer_type)
    reserved = sorted(set(params) & set(_SET_BY_EXTEND))
    if reserved:
        raise ValueError(f"{reserved} are set by extend_context itself, not through **params")
    refusal = rope_type_refusal(get("model_type"), method)
    if refusal is not None:
        written = WRITTEN_ROPE_TYPE[method]
        raise ValueError(f"method {method!r} writes rope_type {written!r}: {refusal}")
    if current.get("rope_type", current.get("type", "default")) not in _UNSCALED:
        given = original_max_position_embeddings
        new, new_max = rescaled_rope(get, current, method, factor, given, params)
        original = get("original_max_position_embeddings")  # kept, where it is top-level
    else:
        original = original_max_position_embeddings
        if original is None:
            original = get("max_position_embeddings")
        _check_original(original)
        new, new_max = _scaled_rope(get, current, method, factor, original, params)
    if layer_type is not None:  # the other layer types' RoPE as it was
        new = {**{k: dict(v) for k, v in get("rope_parameters").items()}, layer_type: new}
    updates: dict[str, Any] = {"rope_parameters": new, "max_position_embeddings": new_max}
    if get("original_max_position_embeddings") is not None:
        # transformers prefers this top-level key (Phi-3) over the one in rope_parameters
        updates["original_max_position_embeddings"] = original
    if method in _READ_HEAD_DIM and get("head_dim") is None:
        updates.update(_head_dim(get))
    _check_readable(config, updates, layer_type)
    return updates


def _check_original(original: Any) -> None:
    if isinstance(original, bool) or not isinstance(original, int) or not 1 <= original <= MAX_INT:
        raise ValueError(
            f"original_max_position_embeddings must be an int in [1, {MAX_INT}], got {original!r}"
        )


def _scaled_rope(
    get: Getter,
    current: dict[str, Any],
    method: str,
    factor: float,
    original: int,
    params: dict[str, Any],
) -> tuple[dict[str, Any], int]:
    """The scaled RoPE dict of one layer type (``current``: its unscaled one) and the new
    ``max_position_embeddings``."""
    keep = rope_base_keys(get, current)  # base and rotary fraction, as rope_from_hf_config
    keep.update({key: current[key] for key in _CARRIED if key in current})
    base = keep.setdefault("rope_theta", DEFAULT_BASE)
    new_max = int(original * factor)
    if method == "ntk":
        parse_scaling({"rope_type": "ntk", "factor": factor, **params})  # rejects any params
        head_dim = config_head_dim(get)
        rotary_dim = int(head_dim * keep.get("partial_rotary_factor", 1.0))
        ntk_theta = ntk_base(base, factor, rotary_dim)
        return {**keep, "rope_type": "default", "rope_theta": ntk_theta}, new_max
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
    return new, new_max


def _head_dim(get: Getter) -> dict[str, int]:
    """``{"head_dim": hidden_size // num_attention_heads}`` for a config whose ``head_dim``
    is None (Mixtral): what its attention and :func:`~posenc.hf.rope_from_hf_config` use,
    written out because transformers' dynamic and YaRN initialisers read ``config.head_dim``
    and fail on None. A config.json without the key of a class that defaults it to a number
    of its own (Gemma's 256) raises; multi-head latent attention (whose rotary head is
    ``qk_rope_head_dim``) gets nothing."""
    record = records.model_type(get("model_type"))
    if record is not None and record.latent:
        return {}
    if record is not None and "head_dim" in record.required:
        raise ValueError(
            f"model_type {get('model_type')!r}: the config has no head_dim, which its class "
            "defaults to a number of its own; give head_dim"
        )
    return {"head_dim": config_head_dim(get)}


def rope_type_refusal(model_type: Any, method: str) -> str | None:
    """Why ``model_type``'s config class does not take the ``rope_type`` that ``method``
    writes (:attr:`~posenc.hf.records.ModelType.rope_types`), or None where it does.

    Example:
        >>> rope_type_refusal("phi3", "yarn")[:45]
        "model_type 'phi3' takes rope_type 'default' o"
        >>> rope_type_refusal("phi3", "ntk") is None
        True
    """
    record = records.model_type(model_type)
    if record is None or record.rope_types is None:
        return None
    if WRITTEN_ROPE_TYPE[method] in record.rope_types:
        return None
    taken = " or ".join(repr(t) for t in record.rope_types)
    return (
        f"model_type {model_type!r} takes rope_type {taken} only (its config class's "
        "validation, in transformers): a config with another does not save or load"
    )


def extend_refusal(config: Any) -> str | None:
    """Why :func:`extend_context` refuses every model with this config, or None where it
    takes one whose rotary embedding it finds (see there).

    A composite config whose language model sits deeper than one sub-config (Qwen-Omni's
    ``thinker_config.text_config``, beside a talker with a RoPE of its own) is refused: the
    extension of one of its rotary embeddings is not the model's. Qwen-VL, Gemma 3 and
    Llama 4 keep theirs in ``text_config``, which extend_context rewrites.

    Example:
        >>> extend_refusal({"model_type": "llama"}) is None
        True
    """
    if config_getter(language_config(config))("dual_chunk_attention_config") is not None:
        return (
            "its dual_chunk_attention_config is its context extension (Qwen2.5-1M, as vLLM "
            "and SGLang run it): they rotate with the plain rope_theta and would ignore a "
            "RoPE scaling written beside the chunks"
        )
    path = language_path(config)
    if len(path) <= 1:
        return None
    where = "config." + ".".join(path)
    return (
        f"its language model's RoPE is in {where}, beside other parts with a RoPE of their "
        "own; extend_context extends one model's rotary embedding (write the updates into "
        f"{where} and load the model with that config instead)"
    )


class _Updated:
    """A config object seen with ``updates`` written over it (``rope_scaling``, which
    ``rope_parameters`` replaces, reads None)."""

    def __init__(self, config: Any, updates: dict[str, Any]) -> None:
        self._config, self._updates = config, updates

    def __getattr__(self, key: str) -> Any:
        if key in self._updates:
            return self._updates[key]
        if key == "rope_scaling":
            return None
        return getattr(self._config, key)


def _check_readable(config: Any, updates: dict[str, Any], layer_type: str | None) -> None:
    """Raise unless :func:`~posenc.hf.rope_from_hf_config` reads ``config`` with
    ``updates`` written (M-RoPE takes no dynamic scaling, say)."""
    if isinstance(config, Mapping):
        updated: Any = {k: v for k, v in config.items() if k != "rope_scaling"} | updates
    else:
        updated = _Updated(config, updates)
    try:
        rope_from_hf_config(updated, layer_type=layer_type)
    except ValueError as error:
        raise ValueError(f"posenc.hf.rope_from_hf_config cannot read the result: {error}") from None


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
    """Extend a loaded Hugging Face model to a ``factor`` times longer context: a causal LM
    of the Llama family, or any model with one rotary embedding built from its config (or,
    for Qwen-VL, Gemma 3 and Llama 4, from its ``text_config``).

    Sets the config's ``rope_parameters`` and ``max_position_embeddings`` (and the keys
    :func:`extension_updates` names; a composite config: its ``text_config``'s) and rebuilds
    the rotary embedding from the updated config, on the device of the old one (its
    frequency buffers float32, as ``from_pretrained`` builds them). The rotary embedding is
    the ``rotary_emb`` of the one module whose ``config`` is that config
    (``model.model.rotary_emb`` for Llama, ``model.gpt_neox``'s, the language model's of a
    composite one); none or several is an error. The model then gives the same logits as
    the same weights loaded with that config, and the config saves and loads again
    (``save_pretrained``, ``from_pretrained``): the updated config is first built by the
    config's own class, and whatever it refuses raises before the model changes. No weight
    changes: the scalings that want fine-tuning (PI, YaRN) still want it. How each method is
    written in ``rope_parameters``, and why: ``docs/design-notes.md``, "Extending a loaded
    model".

    Args:
        model: a transformers model with ``model.config`` and a rotary embedding as above:
            unscaled (``rope_type`` ``default``), or scaled with ``linear``, ``dynamic``,
            ``yarn`` or ``llama3`` (Llama 3.1), which ``method`` must then name: its factor
            times ``factor`` over the same original length (:mod:`posenc.hf.rescale`).
        method: one of :data:`EXTEND_METHODS`: ``linear`` (position interpolation, Chen et
            al. 2023, arXiv:2306.15595), ``ntk`` (NTK-aware, bloc97 2023), ``dynamic``
            (dynamic NTK), ``yarn`` (Peng et al. 2023, arXiv:2309.00071), ``llama3``
            (Llama 3.1's scaling, low_freq_factor 1 and high_freq_factor 4 unless given);
            one the model type's config class takes (:func:`rope_type_refusal`).
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
        ValueError: an unknown method or key, a factor that is not a number > 1, a method
            the model type does not take, a model :func:`extend_refusal` refuses (Qwen-Omni),
            one without exactly one rotary embedding that reads its config, one scaled
            otherwise (LongRoPE) or by another method, a config its class or its rotary
            embedding refuses; the model is unchanged.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(
            "extend_context expects a Hugging Face model: model.config and a rotary embedding "
            f"(model.model.rotary_emb, ...); {type(model).__name__} has no config"
        )
    refusal = extend_refusal(config)
    if refusal is not None:
        raise ValueError(f"extend_context refuses {type(model).__name__}: {refusal}")
    language = language_config(config)
    if not hasattr(language, "rope_parameters"):
        raise ValueError("extend_context needs transformers >= 5 (config.rope_parameters)")
    updates = extension_updates(
        language, method, factor, original_max_position_embeddings, **params
    )
    owner = _rotary_owner(model, language, language_path(config))
    rotary = owner.rotary_emb
    _check_builds(config, updates, type(rotary))
    for key, value in updates.items():
        setattr(language, key, value)
    device = next((b.device for b in rotary.buffers()), None)
    rebuilt = type(rotary)(config=language)
    owner.rotary_emb = rebuilt if device is None else rebuilt.to(device)
    return model


def _rotary_owner(model: Any, language: Any, path: tuple[str, ...]) -> Any:
    """The one module of ``model`` that holds a ``rotary_emb`` and reads ``language`` (the
    config, or its language model's at ``path``) as its ``config``. A duck-typed model
    without ``named_modules`` is looked at where a causal LM of the Llama family keeps it
    (``model.model``, or ``model``), a module there without ``config`` taken as reading it."""
    if callable(getattr(model, "named_modules", None)):
        candidates, default = list(model.named_modules()), None
    else:
        candidates, default = [("model", getattr(model, "model", None)), ("", model)], language
    owners = [
        (name or "the model itself", module)
        for name, module in candidates
        if getattr(module, "rotary_emb", None) is not None
        and getattr(module, "config", default) is language
    ]
    if len(owners) != 1:
        where = "model.config" + "".join(f".{key}" for key in path)
        found = "none" if not owners else f"several ({[name for name, _ in owners]})"
        raise ValueError(
            "extend_context rebuilds the one rotary embedding (a module's rotary_emb) of a "
            f"model that reads {where}; {type(model).__name__} has {found}"
        )
    return owners[0][1]


def _check_builds(config: Any, updates: dict[str, Any], rotary_class: type) -> None:
    """Raise unless ``config``'s own class takes it with ``updates`` written into its
    language model's config (:func:`~posenc.hf.mrope.language_config`), built from its
    ``to_dict()`` with ``from_dict`` as ``from_pretrained`` loads what ``save_pretrained``
    writes, and ``rotary_class`` builds from that. Whatever transformers raises is named
    in a ValueError; a config without ``to_dict`` and ``from_dict`` is not a transformers
    one, and only the rotary embedding is built."""
    candidate = copy.deepcopy(config)
    for key, value in copy.deepcopy(updates).items():
        setattr(language_config(candidate), key, value)
    to_dict, from_dict = getattr(config, "to_dict", None), getattr(type(config), "from_dict", None)
    step = f"transformers' {type(config).__name__} refuses"
    try:
        if callable(to_dict) and callable(from_dict):
            candidate = from_dict(candidate.to_dict())
        step = f"transformers' {rotary_class.__name__} cannot build from"
        rotary_class(config=language_config(candidate))
    except Exception as error:  # transformers' own errors, of many classes: named here
        message = " ".join(str(error).split())
        raise ValueError(
            f"{step} the config extend_context would write ({type(error).__name__}: {message})"
        ) from error
