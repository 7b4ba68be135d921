"""The attention type of every layer of a Hugging Face config, as transformers' model reads
it, and the strict reading of the keys that decide it.

transformers' hybrid models index ``config.layer_types[i]`` (``"full_attention"``,
``"sliding_attention"``, ``"chunked_attention"``) to pick layer ``i``'s mask. A config
object always has it (its class derives it in ``__post_init__``); a ``config.json`` may
not, and then it is derived here from the keys the class derives it from
(``sliding_window_pattern``, ``global_attn_every_n_layers``, ``no_rope_layers``, ...) by the
same rule. A key a ``config.json`` lacks is an error that names it, never the default of
the config class assumed: that default is a fact of one transformers version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .keys import LAYER_TYPES, config_getter

__all__ = [
    "CHUNKED",
    "DERIVE",
    "FULL",
    "SLIDING",
    "ConfigKeys",
    "count",
    "layer_types",
    "rope_flags",
]

FULL, SLIDING, CHUNKED = LAYER_TYPES


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


def _pattern(key: str, first_full: bool) -> Callable[[ConfigKeys], list[str]]:
    """Layer ``i`` full when ``(i + 1) % p == 0`` (``first_full``: when ``i % p == 0``),
    ``p`` the config's ``key``, as Gemma 3, Cohere2 and ModernBERT derive ``layer_types``."""

    def derive(keys: ConfigKeys) -> list[str]:
        p = count(key, keys.need(key, "sets the full layers when layer_types is not given"))
        shift = 0 if first_full else 1
        return [SLIDING if (i + shift) % p else FULL for i in range(keys.n_layers())]

    return derive


def _alternate(keys: ConfigKeys) -> list[str]:
    """Even layers sliding, odd ones full (Gemma 2, gpt-oss)."""
    return [SLIDING if (i + 1) % 2 else FULL for i in range(keys.n_layers())]


def _qwen2(keys: ConfigKeys) -> list[str]:
    """Sliding from layer ``max_window_layers`` on when ``use_sliding_window`` (Qwen2, Qwen3)."""
    window = qwen_window(keys)
    first = None
    if window is not None:
        first = keys.need("max_window_layers", "sets the first sliding layer")
        if isinstance(first, bool) or not isinstance(first, int):
            raise ValueError(f"max_window_layers must be an int, got {first!r}")
    return [SLIDING if first is not None and i >= first else FULL for i in range(keys.n_layers())]


def qwen_window(keys: ConfigKeys) -> int | None:
    """Qwen2/Qwen3's ``sliding_window``, None unless ``use_sliding_window`` (as their config
    class sets it)."""
    use = keys.need("use_sliding_window", "says whether sliding_window is used")
    return keys.need("sliding_window", "is the window of the sliding layers") if use else None


def _smollm3(keys: ConfigKeys) -> list[str]:
    """Sliding on the NoPE layers when ``use_sliding_window`` and ``sliding_window`` are set."""
    rotates = rope_flags(keys, empty_is_default=False)
    use = keys.need("use_sliding_window", "says whether sliding_window is used")
    window = keys.need("sliding_window", "is the window of the sliding layers")
    on = bool(use) and window is not None
    return [SLIDING if on and not r else FULL for r in rotates]


def _llama4(keys: ConfigKeys) -> list[str]:
    """Chunked on the RoPE layers when ``attention_chunk_size`` is set."""
    rotates = rope_flags(keys, empty_is_default=True)
    chunk = keys.need("attention_chunk_size", "is the chunk of the RoPE layers")
    return [CHUNKED if r and chunk is not None else FULL for r in rotates]


#: model_type -> the rule its config class derives ``layer_types`` by
DERIVE: dict[str, Callable[[ConfigKeys], list[str]]] = {
    "qwen2": _qwen2,
    "qwen3": _qwen2,
    "gemma2": _alternate,
    "gemma3_text": _pattern("sliding_window_pattern", first_full=False),
    "cohere2": _pattern("sliding_window_pattern", first_full=False),
    "gpt_oss": _alternate,
    "llama4_text": _llama4,
    "smollm3": _smollm3,
    "modernbert": _pattern("global_attn_every_n_layers", first_full=True),
}


def check_length(types: Any, n: int) -> None:
    """Raise unless ``types`` is a list of ``n`` layer types (``num_hidden_layers``): every
    model type's ``layer_types`` is read by the layer's index."""
    if isinstance(types, (str, bytes)) or not isinstance(types, Sequence) or len(types) != n:
        raise ValueError(
            f"layer_types must be a list of {n} layer types (num_hidden_layers), got {types!r}"
        )


def layer_types(keys: ConfigKeys, allowed: tuple[str, ...]) -> list[str]:
    """The config's ``layer_types`` (derived by :data:`DERIVE` where it has none), one of
    ``allowed`` (the types the family's model builds a mask for) per layer."""
    n = keys.n_layers()
    types = keys.get("layer_types")
    if types is None:
        types = DERIVE[keys.model_type](keys)
    check_length(types, n)
    unknown = sorted({t for t in types if t not in allowed}, key=str)
    if unknown:
        raise ValueError(
            f"layer_types has {unknown}, for which transformers' {keys.model_type!r} model "
            f"builds no mask; it takes {list(allowed)}"
        )
    return list(types)
