"""A Hugging Face model's RoPE, read from its config: :func:`rope_from_hf_config`.

The frequencies and attention factor that transformers' rotary embedding computes, with
the values transformers keeps outside the RoPE dict filled in the way it uses them
(RoPE: Su et al. 2021, arXiv:2104.09864; the rules: ``docs/design-notes.md``, "Reading a
Hugging Face config").
"""

from __future__ import annotations

from typing import Any

from ..config import check_float, check_int
from ..functional.rope_scaling import ROPE_SCALINGS
from ..rotary.mrope import MRoPE
from ..rotary.rope import RoPE
from . import records
from .dca import dca_from_hf
from .keys import (
    LEGACY_KEYS,
    Getter,
    config_getter,
    config_head_dim,
    config_rope_dict,
    nested_rope_keys,
    rope_base_keys,
)
from .layouts import pair_layout
from .mrope import fit_interleaved, language_config, mrope_keys

__all__ = ["rope_from_hf_config"]

#: scalings whose original context length transformers reads from a top-level
#: ``original_max_position_embeddings`` when the config has one (Phi-3), else from
#: ``rope_parameters``, else from ``max_position_embeddings``
_ORIGINAL_FROM_CONFIG = ("yarn", "llama3", "longrope")


def rope_from_hf_config(
    config: Any, *, layout: str | None = None, layer_type: str | None = None
) -> RoPE:
    """The posenc :class:`~posenc.rotary.RoPE` of a Hugging Face model, from its config.

    Reads what transformers reads (the head size, ``rope_parameters`` or the legacy
    ``rope_scaling``, the top-level ``rope_theta`` and ``partial_rotary_factor``) and fills
    in what posenc's strict scaling records need the way transformers uses it. M-RoPE
    models (Qwen-VL, Qwen-Omni, GLM-4V, ERNIE-4.5-VL, ...: their language model's config,
    :mod:`~posenc.hf.mrope`) give an :class:`~posenc.rotary.MRoPE`; a
    ``dual_chunk_attention_config`` (Qwen2.5-1M) gives ``dca``, as vLLM runs it
    (:mod:`~posenc.hf.dca`; transformers ignores the key). The
    pair layout is the one the model type's code rotates
    (:func:`~posenc.hf.layouts.pair_layout`), never a guess. Every rule, with the reasons:
    ``docs/design-notes.md``, "Reading a Hugging Face config".

    Args:
        config: a transformers config object, or its ``config.json`` contents as a dict.
            Keys set to None count as absent.
        layout: ``"half"`` or ``"interleaved"``, for a model type posenc has not read (its
            ``apply_rotary_pos_emb`` says which); None: the model type's own. A layout that
            contradicts a known model type's raises.
        layer_type: the layer type (``"sliding_attention"``, ``"full_attention"``) whose
            RoPE to read from per-layer-type ``rope_parameters`` (Gemma 3, ModernBERT), as
            the family's rotary embedding reads ``rope_parameters[layer_type]``; a flat
            dict is every type's. :func:`~posenc.hf.layer_plan` reads every layer's.

    Returns:
        a :class:`~posenc.rotary.RoPE` whose ``inv_freq(seq_len)`` and
        ``attention_factor(seq_len)`` equal transformers' rotary embedding for that config.

    Shapes:
        the returned module rotates q ``[batch, heads, seq, head_dim]`` and k ``[batch,
        kv_heads, seq, head_dim]`` at positions ``[seq]`` or ``[batch, seq]`` (M-RoPE:
        ``[3, batch, seq]`` from :func:`posenc.positions.multimodal`).

    Raises:
        ValueError: anything posenc does not know (a rope type such as ``ntk-by-parts``,
            M-RoPE keys in another model, per-layer dicts without ``layer_type``, a model
            type whose pair layout it has not read and no ``layout``), named, never
            silently dropped.

    Example:
        >>> rope = rope_from_hf_config({"model_type": "llama", "hidden_size": 4096,
        ...     "num_attention_heads": 32,
        ...     "max_position_embeddings": 131072, "rope_theta": 500000.0,
        ...     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
        >>> rope.head_dim, rope.config.base, rope.scaling.rope_type, rope.config.layout
        (128, 500000.0, 'llama3', 'half')
    """
    get = config_getter(config)
    model_type = get("model_type")
    records.check_not_refused(model_type)  # before its keys are read (Hunyuan-VL's sections)
    get = config_getter(language_config(config))  # a multimodal config: its language model's
    head_dim = config_head_dim(get)
    params = config_rope_dict(get, layer_type)
    if layer_type is not None and nested_rope_keys(get("rope_parameters") or {}):
        get = _nested_getter(get)
    mrope = mrope_keys(params, model_type)
    rope_type = _rope_type(params, model_type)
    params.update(rope_base_keys(get, params))
    for key in LEGACY_KEYS:
        if key in params:  # named as the config names it (RoPE calls rope_theta base)
            check_float(key, params[key])
    _fill_original_length(params, rope_type, get)

    pairs = pair_layout(model_type, get("rope_interleave"), layout)
    if mrope is not None:  # the pairs of the model type's layout, shared out by axis
        if mrope["mrope_interleaved"] and not mrope["mrope_spatial_first"]:
            n_pairs = RoPE(head_dim=head_dim, scaling=params, layout=pairs).inv_freq().numel()
            mrope["mrope_section"] = fit_interleaved(mrope["mrope_section"], n_pairs)
        return MRoPE(head_dim=head_dim, scaling=params, layout=pairs, **mrope)
    rotary_dim = _rotary_dim(get, model_type, params)
    if get("dual_chunk_attention_config") is not None:  # Qwen2.5-1M, as vLLM runs it
        dca = get("dual_chunk_attention_config")
        return dca_from_hf(
            dca, head_dim=head_dim, params=params, layout=pairs, rotary_dim=rotary_dim
        )
    record = records.model_type(model_type)
    at = "start" if record is None else record.rotary_at  # DeepSeek-V4: the last channels
    return RoPE(
        head_dim=head_dim, scaling=params, layout=pairs, rotary_dim=rotary_dim, rotary_at=at
    )


def _rotary_dim(get: Getter, model_type: Any, params: dict[str, Any]) -> int | None:
    """GPT-J's and CodeGen's ``rotary_dim``, the leading channels of a head their code
    rotates with its fixed base 10000 (None: the whole head, or a model type that
    has no such key); a ``rotary_dim`` in another model type's config, which its code would
    not read the same way, raises rather than being dropped."""
    rotary_dim = get("rotary_dim")
    if rotary_dim is None:
        return None
    record = records.model_type(model_type)
    if record is None or not record.rotary_dim:
        readers = records.model_types(rotary_dim=True)
        raise ValueError(
            f"the config sets rotary_dim={rotary_dim!r}, which posenc reads for {readers} "
            f"only (model_type {model_type!r}): pass a config with partial_rotary_factor, or "
            "build posenc.create('rope', rotary_dim=...)"
        )
    if "partial_rotary_factor" in params:
        raise ValueError("the config sets both rotary_dim and partial_rotary_factor: give one")
    check_int("rotary_dim", rotary_dim, minimum=2, even=True)
    return int(rotary_dim)


def _nested_getter(get: Getter) -> Getter:
    """``get`` without the top-level ``original_max_position_embeddings``: transformers reads
    a per-layer-type dict's own (defaulted to ``max_position_embeddings``), never Phi-3's
    top-level key."""
    return lambda key, default=None: (
        default if key == "original_max_position_embeddings" else get(key, default)
    )


def _rope_type(params: dict[str, Any], model_type: Any) -> str:
    """Set and return ``params["rope_type"]``: the legacy ``type`` read as its name, Phi-3's
    old names for LongRoPE renamed, ``"ntk"`` (which transformers does not run) as vLLM
    runs it (``ntk_mixed``), ``"default"`` when absent; an unknown one raises."""
    if "type" in params:  # the legacy name of rope_type
        legacy = params.pop("type")
        if params.setdefault("rope_type", legacy) != legacy:
            raise ValueError(
                f"rope_parameters has type={legacy!r} and rope_type={params['rope_type']!r}"
            )
    rope_type = params.setdefault("rope_type", "default")
    if model_type == "phi3" and rope_type in ("su", "yarn"):
        rope_type = params["rope_type"] = "longrope"
    if rope_type == "ntk":  # no transformers type: vLLM's "ntk" (with mixed_b) reads it
        rope_type = params["rope_type"] = "ntk_mixed"
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"unknown rope_type {rope_type!r}; accepted: {sorted(ROPE_SCALINGS)}")
    return rope_type


def _fill_original_length(params: dict[str, Any], rope_type: str, get: Getter) -> None:
    """Write into ``params`` the original context length (and the factor of YaRN and
    LongRoPE when absent) that transformers takes from outside the RoPE dict."""
    original_key = "original_max_position_embeddings"
    if rope_type == "dynamic" and params.get("alpha"):  # Hunyuan's static NTK-alpha: no
        return  # length is read (its rotary embedding never rescales), none is required
    if rope_type == "dynamic":  # transformers scales only past max_position_embeddings
        original = _max_positions(get, rope_type)
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
            params[original_key] = _max_positions(get, rope_type)
        check_int(original_key, params[original_key])
        if rope_type in ("yarn", "longrope") and "factor" not in params:
            params["factor"] = _max_positions(get, rope_type) / params[original_key]


def _max_positions(get: Getter, rope_type: str) -> int:
    """The config's ``max_position_embeddings``, which ``rope_type`` scaling needs."""
    max_positions = get("max_position_embeddings")
    if max_positions is None:
        raise ValueError(f"{rope_type!r} scaling needs the config's max_position_embeddings")
    check_int("max_position_embeddings", max_positions)
    return max_positions
