"""A Hugging Face config's positional plan, layer by layer: :func:`layer_plan`, and what a
plan does not hold beside it: :func:`score_scale` and :func:`is_causal`.

Each family is read as transformers 5.24's modeling code runs it (its attention module,
its rotary embedding, the masks ``masking_utils`` builds for each ``layer_types`` entry),
and anything else is an error that names the key, never a guess:

- Mistral, Mixtral: ``sliding_window`` on every layer, or None;
- Qwen2, Qwen3: ``layer_types`` (from ``use_sliding_window`` and ``max_window_layers``);
- Gemma 2: sliding/full ``layer_types``, ``attn_logit_softcapping`` on every layer;
- Gemma 3: sliding/full, each type with its own RoPE (``rope_parameters[layer_type]``;
  ``rope_local_base_freq`` for the local ones in an old ``config.json``);
- Cohere2: RoPE on the sliding layers only, the full ones NoPE;
- gpt-oss: sliding/full, sinks on every layer, YaRN;
- Llama 4 text: NoPE where ``no_rope_layers`` is 0, with the query temperature
  (``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``); ``attention_chunk_size``
  on the ``chunked_attention`` layers;
- SmolLM3: NoPE where ``no_rope_layers`` is 0;
- ModernBERT (bidirectional): sliding/full from ``global_attn_every_n_layers``, the window
  ``local_attention``, a RoPE per type (``global_rope_theta``, ``local_rope_theta``);
- OLMo 3, Ministral, CWM, Mellum, Laguna: sliding/full ``layer_types``, every layer
  rotating (OLMo 3, Mellum and Laguna with a RoPE per layer type);
- AFMoE: RoPE on the sliding layers only, as Cohere2;
- EXAONE 4, EXAONE-MoE, Kolibri: RoPE on the sliding layers only when a window is set
  (every layer without one).

Windows: a causal sliding layer's mask is ``kv_idx > q_idx - sliding_window`` with
``kv_idx <= q_idx`` (``sliding_window_overlay``): ``sliding_window`` keys, the query's own
included, which is posenc's ``window``. ModernBERT's is ``|q_idx - kv_idx| <=
local_attention // 2`` (``sliding_window_bidirectional_overlay`` of the config's
``sliding_window = local_attention // 2``), posenc's bidirectional ``window=local_attention``.
Chunks: ``kv_idx // C == q_idx // C`` (``chunked_overlay``, counted from the first real
token, as posenc's positions from padding count), posenc's ``chunk``. Any other model type
is one RoPE on every layer, when it sets none of the keys that would make its layers differ.
"""

from __future__ import annotations

from typing import Any

from ..config import check_float
from ..models.plan import LayerPlan
from ..models.spec import LayerSpec
from .families import FAMILIES, Family
from .families.common import FULL, check_length
from .keys import ConfigKeys, config_head_dim
from .mrope import language_path
from .records import MODEL_TYPES, model_type
from .rope import rope_from_hf_config

__all__ = ["PATTERN_KEYS", "is_causal", "layer_plan", "score_scale"]

#: the keys that make layers differ in some family; a model type posenc has not read is
#: refused when it sets one (to anything but None or False)
PATTERN_KEYS = (
    "sliding_window",
    "use_sliding_window",
    "sliding_window_pattern",
    "interleaved_sliding_window",
    "attention_chunk_size",
    "no_rope_layers",
    "no_rope_layer_interval",
    "global_attn_every_n_layers",
    "local_attention",
    "attn_logit_softcapping",
    "rope_local_base_freq",
    "local_rope_theta",
    "global_rope_theta",
    "attn_temperature_tuning",
    "use_bidirectional_attention",
)


def layer_plan(config: Any, *, layout: str | None = None) -> LayerPlan:
    """The positional plan of a Hugging Face model, one :class:`~posenc.models.LayerSpec`
    per layer, read from its config exactly as transformers runs it, or refused.

    Each layer's encoding is the :class:`~posenc.rotary.RoPE` of
    :func:`~posenc.hf.rope_from_hf_config` (fp32, the family's pair layout; one instance
    shared by the layers of a type) or None (NoPE); its pattern the sliding ``window`` or
    ``chunk`` of its layer type; ``sinks``, ``softcap`` and ``temperature`` as its
    attention applies them. Build ``TransformerLM(..., plan=layer_plan(config),
    causal=is_causal(config))`` with ``head_dim`` and the heads of the config; the score
    scale, which a plan does not hold, is :func:`score_scale`.

    Args:
        config: a transformers config object, or its ``config.json`` dict (whose absent keys
            are errors, never the config class's defaults); a language model's config (of a
            composite one, its ``text_config``; of an M-RoPE one, its language model's is
            read, :func:`~posenc.hf.mrope.language_path`).
        layout: the RoPE pair layout of a model type posenc has not read (as
            :func:`~posenc.hf.rope_from_hf_config`).

    Returns:
        the :class:`~posenc.models.LayerPlan`, ``num_hidden_layers`` long.

    Raises:
        ValueError: what cannot be read exactly, named: a key a ``config.json`` lacks, a
            layer type the family builds no mask for, a pattern key of a model type posenc
            has not read, contradictory keys, and everything ``rope_from_hf_config`` refuses.

    Example:
        >>> plan = layer_plan({"model_type": "cohere2", "num_hidden_layers": 4,
        ...     "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0,
        ...     "sliding_window": 4096, "sliding_window_pattern": 4})
        >>> [(layer.pattern.describe(), layer.encoding is None) for layer in plan]
        [('window 4096', False), ('window 4096', False), ('window 4096', False), ('full', True)]
    """
    keys = ConfigKeys(config)
    record = model_type(keys.model_type)
    if record is not None and record.plan_refused is not None:
        raise ValueError(f"model_type {keys.model_type!r} has no layer plan: {record.plan_refused}")
    family = _family(keys)
    if family is None:
        return _uniform(keys, layout)
    record = model_type(keys.model_type)
    for key in () if record is None else record.required:
        keys.need(key, "its config class defaults to a number of its own")
    return LayerPlan(family.read(keys, layout))


def score_scale(config: Any) -> float:
    """The factor transformers multiplies every layer's ``q · kᵀ`` by:
    ``query_pre_attn_scalar ** -0.5`` for Gemma 2 and 3, ``head_dim ** -0.5`` for the other
    families :func:`layer_plan` reads (posenc's attention uses ``head_dim ** -0.5``).

    Raises:
        ValueError: what :func:`layer_plan` raises, and for a model type posenc has not read.

    Example:
        >>> score_scale({"model_type": "mistral", "num_hidden_layers": 1, "head_dim": 64,
        ...     "sliding_window": None, "rope_theta": 1e6})
        0.125
    """
    keys, family = _read_family(config)
    if family.scale_key is None:
        return float(config_head_dim(keys.get)) ** -0.5
    value = keys.need(family.scale_key, "sets the score scale")
    try:
        check_float(family.scale_key, value)
    except TypeError as e:
        raise ValueError(str(e)) from e
    return float(value) ** -0.5


def is_causal(config: Any) -> bool:
    """Whether the model's attention is causal (the ``causal=`` of a
    :class:`~posenc.models.TransformerLM` built with :func:`layer_plan`'s plan, which sets
    how its windows read): False for ModernBERT.

    Raises:
        ValueError: what :func:`layer_plan` raises, and for a model type posenc has not read.
    """
    return _read_family(config)[1].causal


def _family(keys: ConfigKeys) -> Family | None:
    """The family of ``keys``' model type (None: one posenc has not read); a composite
    config raises, naming its language model's."""
    record = model_type(keys.model_type)
    if record is None:
        return None
    if record.text is not None and keys.get("text_config") is not None:
        raise ValueError(
            f"model_type {keys.model_type!r} is a composite config: its language model's plan "
            f"is layer_plan(config.text_config) (model_type {record.text!r}); what the vision "
            "tokens see is no part of a plan"
        )
    return None if record.family is None else FAMILIES[record.family]


def _read_family(config: Any) -> tuple[ConfigKeys, Family]:
    """The keys and family of ``config``, checked by reading its plan."""
    keys = ConfigKeys(config)
    family = _family(keys)
    if family is None:
        raise ValueError(
            f"posenc has not read the attention of model_type {keys.model_type!r}; it reads "
            f"{_read_types()}"
        )
    layer_plan(config)
    return keys, family


def _uniform(keys: ConfigKeys, layout: str | None) -> LayerPlan:
    """One RoPE on every layer of a model type posenc has not read, when the config sets
    none of :data:`PATTERN_KEYS` and only full ``layer_types``."""
    checked = [keys]
    for key in language_path(keys.config):  # M-RoPE models: rope_from_hf_config reads it
        checked.append(ConfigKeys(checked[-1].get(key)))
    sized = checked[-1] if keys.get("num_hidden_layers") is None else keys
    for part in checked:
        for key in PATTERN_KEYS:
            if part.get(key) not in (None, False):
                raise ValueError(
                    f"model_type {keys.model_type!r} sets {key}={part.get(key)!r}, which makes "
                    "layers differ in the families posenc has read; it has not read this "
                    f"one's (it reads {_read_types()}), and would not ignore the key"
                )
        types = part.get("layer_types")
        if types is None:
            continue
        if any(t != FULL for t in types):
            raise ValueError(
                f"model_type {keys.model_type!r} has layer_types {sorted(set(types))}, which "
                f"posenc has not read for it (it reads {_read_types()})"
            )
        check_length(types, sized.n_layers())
    rope = rope_from_hf_config(keys.config, layout=layout)
    return LayerPlan([LayerSpec(rope)] * sized.n_layers())


def _read_types() -> list[str]:
    """The model types whose layer plans posenc reads."""
    return sorted(name for name, record in MODEL_TYPES.items() if record.family is not None)
