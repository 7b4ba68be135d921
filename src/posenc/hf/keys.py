"""Reading a Hugging Face config: its keys by name, whether it is the config object or its
``config.json`` dict, and the two values every rotary model has (the head size and the
RoPE dict).

transformers is never imported: the config is duck-typed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config import check_int
from . import records
from .deepseek_v4 import fold_deepseek_v4

__all__ = [
    "CHUNKED",
    "FULL",
    "LAYER_TYPES",
    "LEGACY_KEYS",
    "SLIDING",
    "ConfigKeys",
    "Getter",
    "config_getter",
    "config_head_dim",
    "config_rope_dict",
    "count",
    "nested_rope_keys",
    "rope_base_keys",
]

#: ``get(key, default=None)``: a config's value for ``key``
Getter = Callable[..., Any]

#: the keys a RoPE dict may take from the config's top level, with the legacy name GPT-NeoX's
#: ``config.json`` uses for each (transformers 5 reads those into ``rope_parameters`` too)
LEGACY_KEYS = {"rope_theta": "rotary_emb_base", "partial_rotary_factor": "rotary_pct"}


#: model type -> how its config class folds the keys of a ``config.json`` that posenc reads
#: (their RoPE): every reader sees the keys as the class holds them
_FOLDS: dict[str, Callable[[Getter], Getter]] = {"deepseek_v4": fold_deepseek_v4}

#: the layer types whose masks posenc builds (transformers' names): ``layer_types`` entries
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
FULL, SLIDING, CHUNKED = LAYER_TYPES


def config_getter(config: Any, name: str = "config") -> Getter:
    """``get(key, default=None)`` for a config object or its ``config.json`` dict, its RoPE
    keys as the model type's config class folds them (DeepSeek-V4's flat keys as its two
    RoPEs: :mod:`~posenc.hf.deepseek_v4`); a ``TypeError`` naming ``name`` for anything
    else (a string, a number, None)."""
    if not isinstance(config, Mapping) and not hasattr(config, "__dict__"):
        raise TypeError(
            f"{name} must be a dict (a config.json's contents) or a config object, got "
            f"{type(config).__name__} ({config!r})"
        )
    get: Getter = config.get if isinstance(config, Mapping) else _attributes(config)
    model_type = get("model_type")
    fold = _FOLDS.get(model_type) if isinstance(model_type, str) else None
    return get if fold is None else fold(get)


def _attributes(config: Any) -> Getter:
    """``get(key, default=None)`` of a config object: its attribute."""
    return lambda key, default=None: getattr(config, key, default)


def config_head_dim(get: Getter) -> int:
    """The rotary head size: ``qk_rope_head_dim`` (MLA), ``head_dim``, or hidden / heads
    (``hidden_size`` and ``num_attention_heads``, or GPT-J's ``n_embd`` and ``n_head``).
    A model type whose rotary channels end its head (DeepSeek-V4: ``[nope | rope]``, its
    ``qk_rope_head_dim`` the rope part that ``partial_rotary_factor`` also gives) reads
    ``head_dim``."""
    record = records.model_type(get("model_type"))
    whole = record is not None and record.rotary_at == "end"
    for key in ("head_dim",) if whole else ("qk_rope_head_dim", "head_dim"):
        if get(key) is not None:
            check_int(key, get(key))
            return get(key)
    names = ("hidden_size", "num_attention_heads")
    if get(names[0]) is None and get(names[1]) is None:  # GPT-J's and CodeGen's config.json
        names = ("n_embd", "n_head")
    hidden, heads = get(names[0]), get(names[1])
    if hidden is None or heads is None:
        raise ValueError(
            "the config has neither head_dim nor hidden_size and num_attention_heads; "
            "cannot tell the head size"
        )
    check_int(names[0], hidden)
    check_int(names[1], heads)
    return hidden // heads


def config_rope_dict(get: Getter, layer_type: str | None = None) -> dict[str, Any]:
    """``rope_parameters`` (transformers 5) or the legacy ``rope_scaling``, None values dropped.

    Per-layer-type ``rope_parameters`` (``{"sliding_attention": {...}, "full_attention":
    {...}}``: Gemma 3, ModernBERT) give the dict of ``layer_type``, and raise without one;
    a flat dict is every layer type's: of the config's ``layer_types`` where it has them,
    else of :data:`LAYER_TYPES`."""
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a str, got {type(layer_type).__name__}")
    params = _rope_parameters(get)
    nested = nested_rope_keys(params)
    if not nested and layer_type is not None:
        declared = get("layer_types")
        known = LAYER_TYPES if declared is None else tuple(dict.fromkeys(declared))
        if layer_type not in known:
            where = (
                "the layer types posenc reads" if declared is None else "the config's layer_types"
            )
            raise ValueError(f"layer_type must be one of {where} {list(known)}, got {layer_type!r}")
    if nested:
        if layer_type is None:
            record = records.model_type(get("model_type"))
            plan = record is None or record.plan_refused is None
            whole = ", or read the whole model with posenc.hf.layer_plan" if plan else ""
            raise ValueError(
                f"per-layer rope_parameters (keys {nested}): pass layer_type= (one of them)" + whole
            )
        if not isinstance(params.get(layer_type), Mapping):
            raise ValueError(
                f"layer_type must be one of the layer types of the config's rope_parameters "
                f"{nested}, got {layer_type!r}"
            )
        params = params[layer_type]
    return {k: v for k, v in params.items() if v is not None}


def nested_rope_keys(params: Mapping[str, Any]) -> list[str]:
    """The keys of ``params`` (a RoPE dict) whose values are dicts: the layer types of
    per-layer-type ``rope_parameters``; empty for a flat one."""
    return [k for k, v in params.items() if isinstance(v, Mapping)]


def _rope_parameters(get: Getter) -> Mapping[str, Any]:
    """``rope_parameters`` or ``rope_scaling`` (equal when both are given), or ``{}``."""
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
    return params


def rope_base_keys(get: Getter, params: Mapping[str, Any]) -> dict[str, Any]:
    """``rope_theta`` and ``partial_rotary_factor`` as transformers reads them: the value in
    ``params`` (the RoPE dict), else the config's top-level key, else its legacy name
    (:data:`LEGACY_KEYS`); keys found nowhere are left out. Values are not checked."""
    found = {}
    for key, legacy_key in LEGACY_KEYS.items():
        value = params.get(key)
        for name in (key, legacy_key):
            value = get(name) if value is None else value
        if value is not None:
            found[key] = value
    return found


class ConfigKeys:
    """A config's keys, object or ``config.json`` dict, read strictly.

    Attributes:
        config: the config as given.
        get: ``get(key)``: the value, None where absent.
        is_dict: whether it is a ``config.json`` dict (whose absent keys are errors).
        model_type: the config's ``model_type``.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.is_dict = isinstance(config, Mapping)
        self.get = config_getter(config)
        self.model_type = self.get("model_type")

    def need(self, key: str, why: str) -> Any:
        """The value of ``key`` (None allowed), which ``why`` needs; raises where the
        config does not have the key at all."""
        present = key in self.config if self.is_dict else hasattr(self.config, key)
        if not present:
            raise ValueError(
                f"model_type {self.model_type!r}: the config has no {key!r}, which {why}; "
                f"transformers' config class would fill in its default, which posenc does not "
                f"assume: give {key!r}, or pass the config object "
                "(transformers.AutoConfig.for_model(**config))"
            )
        return self.get(key)

    def n_layers(self) -> int:
        """``num_hidden_layers``, checked."""
        return count("num_hidden_layers", self.need("num_hidden_layers", "sizes the plan"))


def count(key: str, value: Any) -> int:
    """``value`` as an int >= 1, else a ValueError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be an int >= 1, got {value!r}")
    return value
