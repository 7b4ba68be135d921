"""DeepSeek-V4's RoPE keys, folded the way transformers' ``DeepseekV4Config`` folds them:
:func:`fold_deepseek_v4` (DeepSeek-AI, "DeepSeek-V4": sliding-window and compressed
attention, section 2.3 of its report, as transformers 5.24 reads its checkpoints).

A V4 checkpoint's ``config.json`` ships its RoPE flat: a YaRN ``rope_scaling`` (or
``rope_parameters``), ``rope_theta``, ``compress_rope_theta`` and ``qk_rope_head_dim``.
Its model runs two RoPEs, each on the last ``qk_rope_head_dim`` channels of a head:

- ``main`` (the sliding-window-only layers): base ``rope_theta``, no scaling;
- ``compress`` (the compressed layers, their compressors and indexers): base
  ``compress_rope_theta``, the flat dict's scaling, YaRN's ``attention_factor`` 1 unless
  given (V4's reference multiplies no temperature into cos and sin).

transformers' config class folds the flat keys into per-label ``rope_parameters``
(``{"main": {...}, "compress": {...}}``, ``qk_rope_head_dim / head_dim`` as each one's
``partial_rotary_factor``); a config already in that form keeps it, a dict without its
own ``partial_rotary_factor`` taking the config's (transformers'
``standardize_rope_params``). :func:`fold_deepseek_v4` gives a config's keys in that
form (:func:`~posenc.hf.keys.config_getter` calls it), so every reader of
:mod:`posenc.hf` sees the two RoPEs (``layer_type="main"`` or ``"compress"``).

Where a ``config.json`` leaves a key out, the class's own default is the model's definition
(not a guess), so it is read as the class fills it (:data:`DEFAULTS`: ``head_dim`` 512, a
rotary fraction of 64/512, ``rope_theta`` 10000, ``compress_rope_theta`` 160000). Values
that contradict each other (``qk_rope_head_dim`` and ``partial_rotary_factor`` that
disagree, a flat dict's ``rope_theta`` that transformers would drop, a dict for one label
only) are refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config import check_float, check_int

__all__ = ["DEFAULTS", "LABELS", "fold_deepseek_v4"]

#: the labels of V4's two RoPEs (its ``rope_parameters`` keys; not layer types)
LABELS = ("main", "compress")

#: ``DeepseekV4Config``'s class defaults for the keys a ``config.json`` may leave out
#: (transformers 5.24: ``head_dim``, ``default_partial_rotary_factor`` = 64 / 512,
#: ``rope_theta``, ``compress_rope_theta``)
DEFAULTS: dict[str, Any] = {
    "head_dim": 512,
    "partial_rotary_factor": 64 / 512,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
}

_Getter = Callable[..., Any]


def fold_deepseek_v4(get: _Getter) -> _Getter:
    """``get`` (a V4 config's ``get(key, default=None)``) with its keys as
    ``DeepseekV4Config`` holds them: ``head_dim``, ``rope_theta``, ``compress_rope_theta``,
    ``partial_rotary_factor`` and ``qk_rope_head_dim`` given or the class's defaults
    (:data:`DEFAULTS`); ``rope_parameters`` per label (:data:`LABELS`) and ``rope_scaling``
    None; every other key as ``get`` gives it.

    Raises:
        ValueError: ``qk_rope_head_dim`` and ``partial_rotary_factor`` that disagree; a
            flat dict's ``rope_theta`` or ``partial_rotary_factor`` that transformers would
            drop; a dict for one label only; a key out of range. Each named.
        TypeError: a key of the wrong type, named.

    Example:
        >>> get = fold_deepseek_v4({"model_type": "deepseek_v4", "head_dim": 512,
        ...     "qk_rope_head_dim": 64, "rope_theta": 10000.0,
        ...     "compress_rope_theta": 160000.0, "rope_scaling": {"type": "yarn",
        ...     "factor": 16, "original_max_position_embeddings": 65536}}.get)
        >>> get("rope_parameters")["main"]
        {'rope_type': 'default', 'partial_rotary_factor': 0.125, 'rope_theta': 10000.0}
        >>> get("rope_parameters")["compress"]["rope_theta"], get("rope_scaling")
        (160000.0, None)
        >>> fold_deepseek_v4({"model_type": "deepseek_v4"}.get)("qk_rope_head_dim")
        64
    """
    folded = {key: _given(get, key) for key in ("head_dim", "rope_theta", "compress_rope_theta")}
    head_dim = folded["head_dim"]
    check_int("head_dim", head_dim, even=True)
    check_float("rope_theta", folded["rope_theta"])
    check_float("compress_rope_theta", folded["compress_rope_theta"])
    fraction = _fraction(get, head_dim)
    folded["partial_rotary_factor"] = fraction
    folded["qk_rope_head_dim"] = int(head_dim * fraction)
    params = _rope_dict(get)
    if not all(isinstance(params.get(label), Mapping) for label in LABELS):
        folded["rope_parameters"] = _fold(folded, params)
        folded["rope_scaling"] = None

    def folded_get(key: str, default: Any = None) -> Any:
        return folded[key] if key in folded else get(key, default)

    return folded_get


def _given(get: _Getter, key: str) -> Any:
    """The config's ``key``, or the class's default where it has none."""
    value = get(key)
    return DEFAULTS[key] if value is None else value


def _rope_dict(get: _Getter) -> Mapping[str, Any]:
    """The config's ``rope_parameters`` or legacy ``rope_scaling`` (``{}`` for none); a
    dict for one label only raises."""
    params = get("rope_parameters")
    params = get("rope_scaling") if params is None else params
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValueError(f"rope_parameters must be a dict, got {params!r}")
    labels = [label for label in LABELS if isinstance(params.get(label), Mapping)]
    if len(labels) == 1:
        raise ValueError(
            f"model_type 'deepseek_v4': rope_parameters has a dict for {labels[0]!r} only; "
            f"give one for each of {list(LABELS)}, or a flat one"
        )
    return params


def _fraction(get: _Getter, head_dim: int) -> float:
    """The config's rotary fraction: ``partial_rotary_factor``, else
    ``qk_rope_head_dim / head_dim``, else the class's 64 / 512; both given, they agree."""
    fraction, rope_dim = get("partial_rotary_factor"), get("qk_rope_head_dim")
    if rope_dim is not None:
        check_int("qk_rope_head_dim", rope_dim, even=True, maximum=head_dim)
    if fraction is None:
        return DEFAULTS["partial_rotary_factor"] if rope_dim is None else rope_dim / head_dim
    check_float("partial_rotary_factor", fraction)
    if rope_dim is not None and int(head_dim * fraction) != rope_dim:
        raise ValueError(
            f"qk_rope_head_dim={rope_dim} and partial_rotary_factor={fraction} disagree "
            f"(head_dim {head_dim} · {fraction} = {int(head_dim * fraction)}): give one"
        )
    return float(fraction)


def _fold(folded: Mapping[str, Any], flat: Mapping[str, Any]) -> dict[str, Any]:
    """The per-label dicts of a flat config (``folded``: its keys as the class holds them):
    ``main`` plain at ``rope_theta``, ``compress`` the flat dict's scaling at
    ``compress_rope_theta``."""
    flat = {k: v for k, v in flat.items() if v is not None}
    fraction = folded["partial_rotary_factor"]
    for key in ("rope_theta", "partial_rotary_factor"):
        if key in flat and flat[key] != folded[key]:
            raise ValueError(
                f"model_type 'deepseek_v4': rope_parameters has {key}={flat[key]!r}, which "
                f"transformers drops (it reads {key}={folded[key]!r}: rope_theta and "
                "compress_rope_theta from the config's top level): remove it"
            )
    main = {"rope_type": "default", "partial_rotary_factor": fraction}
    main["rope_theta"] = folded["rope_theta"]
    compress = {k: v for k, v in flat.items() if k not in ("type", "rope_theta")}
    compress["rope_type"] = flat.get("rope_type", flat.get("type", "default"))
    compress["partial_rotary_factor"] = fraction
    compress["rope_theta"] = folded["compress_rope_theta"]
    if compress["rope_type"] == "yarn":  # V4's reference applies no YaRN temperature
        compress.setdefault("attention_factor", 1.0)
    return {"main": main, "compress": compress}
