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

Where transformers would fill a class default of its own (``head_dim`` 512, a rotary
fraction of 64/512, ``compress_rope_theta`` 160000), a ``config.json`` without the key is
refused, naming it, as :mod:`posenc.hf` refuses every such default; a key transformers
would drop (a ``rope_theta`` in the flat dict that is not the config's) is refused too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config import check_float, check_int

__all__ = ["LABELS", "fold_deepseek_v4"]

#: the labels of V4's two RoPEs (its ``rope_parameters`` keys; not layer types)
LABELS = ("main", "compress")

_Getter = Callable[..., Any]


def fold_deepseek_v4(get: _Getter) -> _Getter:
    """``get`` (a V4 config's ``get(key, default=None)``) with its RoPE keys as
    ``DeepseekV4Config`` folds them: ``rope_parameters`` per label (:data:`LABELS`),
    ``rope_scaling`` None, ``partial_rotary_factor`` and ``qk_rope_head_dim`` the folded
    ones; every other key as ``get`` gives it.

    Raises:
        ValueError: a config.json without ``head_dim``, without ``qk_rope_head_dim`` or
            ``partial_rotary_factor``, or (a flat one) without ``compress_rope_theta``;
            ``qk_rope_head_dim`` and ``partial_rotary_factor`` that disagree; a flat
            dict's ``rope_theta`` or ``partial_rotary_factor`` that transformers would
            drop; a dict for one label only. Each named.
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
    """
    head_dim = get("head_dim")
    if head_dim is None:
        raise ValueError(
            "model_type 'deepseek_v4': the config has no head_dim, which its class defaults "
            "to 512 (not hidden_size / num_attention_heads), a default posenc does not "
            "assume: give head_dim, or pass the config object"
        )
    check_int("head_dim", head_dim, even=True)
    params = _rope_dict(get)
    folded: dict[str, Any] = {}
    nested = all(isinstance(params.get(label), Mapping) for label in LABELS)
    if not nested or any(_own(params[label]) is None for label in LABELS):
        fraction = _fraction(get, head_dim)
        folded["partial_rotary_factor"] = fraction
        folded["qk_rope_head_dim"] = int(head_dim * fraction)
        if not nested:
            folded["rope_parameters"] = _fold(get, params, fraction)
            folded["rope_scaling"] = None

    def folded_get(key: str, default: Any = None) -> Any:
        return folded[key] if key in folded else get(key, default)

    return folded_get


def _own(params: Mapping[str, Any]) -> Any:
    """One label's own ``partial_rotary_factor`` (None where it has none: then the
    config's, as transformers' ``standardize_rope_params`` fills it in)."""
    return params.get("partial_rotary_factor")


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
    """The rotary fraction of a flat config: ``partial_rotary_factor``, else
    ``qk_rope_head_dim / head_dim``; both given, they agree."""
    fraction, rope_dim = get("partial_rotary_factor"), get("qk_rope_head_dim")
    if rope_dim is not None:
        check_int("qk_rope_head_dim", rope_dim, even=True, maximum=head_dim)
    if fraction is None:
        if rope_dim is None:
            raise ValueError(
                "model_type 'deepseek_v4': the config has neither qk_rope_head_dim nor "
                "partial_rotary_factor (its class defaults to 64 of 512 channels, a default "
                "posenc does not assume): give qk_rope_head_dim"
            )
        return rope_dim / head_dim
    check_float("partial_rotary_factor", fraction)
    if rope_dim is not None and int(head_dim * fraction) != rope_dim:
        raise ValueError(
            f"qk_rope_head_dim={rope_dim} and partial_rotary_factor={fraction} disagree "
            f"(head_dim {head_dim} · {fraction} = {int(head_dim * fraction)}): give one"
        )
    return float(fraction)


def _fold(get: _Getter, flat: Mapping[str, Any], fraction: float) -> dict[str, Any]:
    """The per-label dicts of a flat config: ``main`` plain at ``rope_theta``,
    ``compress`` the flat dict's scaling at ``compress_rope_theta``."""
    flat = {k: v for k, v in flat.items() if v is not None}
    base = get("rope_theta")
    for key, used in (("rope_theta", base), ("partial_rotary_factor", fraction)):
        if key in flat and flat[key] != used:
            raise ValueError(
                f"model_type 'deepseek_v4': rope_parameters has {key}={flat[key]!r}, which "
                f"transformers drops (it reads {key}={used!r}: rope_theta and "
                "compress_rope_theta from the config's top level): remove it"
            )
    main: dict[str, Any] = {"rope_type": "default", "partial_rotary_factor": fraction}
    if base is not None:  # absent: 10000, the class's default and RoPE's
        main["rope_theta"] = base
    compress = {k: v for k, v in flat.items() if k not in ("type", "rope_theta")}
    compress["rope_type"] = flat.get("rope_type", flat.get("type", "default"))
    compress["partial_rotary_factor"] = fraction
    compress_base = get("compress_rope_theta")
    if compress_base is None:
        raise ValueError(
            "model_type 'deepseek_v4': the config has no compress_rope_theta (the base of "
            "its compressed layers' RoPE), which its class defaults to 160000, a default "
            "posenc does not assume: give compress_rope_theta"
        )
    check_float("compress_rope_theta", compress_base)
    compress["rope_theta"] = compress_base
    if compress["rope_type"] == "yarn":  # V4's reference applies no YaRN temperature
        compress.setdefault("attention_factor", 1.0)
    return {"main": main, "compress": compress}
