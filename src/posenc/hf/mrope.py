"""The Hugging Face model types with M-RoPE, and how each shares its rotary pairs out
between the temporal, height and width ids (the records' ``ModelType.mrope``,
:mod:`posenc.hf.records`), read off each family's
rotary embedding in transformers 5.24 (``tests/hf/test_mrope.py`` rotates with every one).

- sectioned ``t, h, w`` blocks: Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni, GLM-4V (and GLM-4.6V,
  GLM-OCR, GLM-Image, GLM-4.5V), PaddleOCR-VL (Wang et al. 2024, arXiv:2409.12191);
- interleaved ``t, h, w, t, h, w, ...``: Qwen3-VL, Qwen3-Omni, Qwen3.5, Cosmos3-Edge,
  HunYuan-V4-VL (Bai et al. 2025, arXiv:2511.21631);
- interleaved spatial first ``h, w, h, w, ..., t, t``: ERNIE-4.5-VL, whose
  ``mrope_section`` lists (h, w, t) where the others list (t, h, w).

The pair layout (half or interleaved) is the model type's, from
:func:`~posenc.hf.layouts.pair_layout`; a partial rotary factor is read with the RoPE.
Composite configs hold their language model's config: :func:`language_path`.
"""

from __future__ import annotations

from typing import Any

from . import records
from .keys import config_getter

__all__ = [
    "fit_interleaved",
    "language_config",
    "language_path",
    "mrope_keys",
]


#: the keys down from a composite M-RoPE config to its language model's, in order (a
#: Qwen-Omni config holds a thinker, which holds the text model)
_LANGUAGE_KEYS = ("thinker_config", "text_config")


def language_path(config: Any) -> tuple[str, ...]:
    """The keys from a composite model's config down to its language model's config:
    ``("thinker_config", "text_config")`` for Qwen-Omni, ``("text_config",)`` for Qwen-VL,
    Gemma 3 and Llama 4 (their records' ``text``), ``()`` for a text config
    or any other model.

    Example:
        >>> language_path({"model_type": "qwen2_5_omni", "thinker_config": {
        ...     "model_type": "qwen2_5_omni_thinker", "text_config": {"head_dim": 128}}})
        ('thinker_config', 'text_config')
    """
    path: list[str] = []
    get = config_getter(config)
    for key in _LANGUAGE_KEYS:
        record = records.model_type(get("model_type"))
        composite = record is not None and (record.mrope is not None or record.text is not None)
        if composite and get(key) is not None:
            path.append(key)
            get = config_getter(get(key), key)
    return tuple(path)


def language_config(config: Any) -> Any:
    """The language model's config inside ``config`` (:func:`language_path`)."""
    for key in language_path(config):
        config = config_getter(config)(key)
    return config


def mrope_keys(params: dict[str, Any], model_type: Any) -> dict[str, Any] | None:
    """Take M-RoPE's keys out of ``params`` (a config's RoPE dict): the
    :class:`~posenc.rotary.MRoPE` keys of an M-RoPE model type, None for other models
    (which must not carry M-RoPE keys)."""
    legacy = [k for k in ("type", "rope_type") if params.get(k) == "mrope"]
    found = [k for k in ("mrope_section", "mrope_interleaved") if k in params] + [
        f"{k}='mrope'" for k in legacy
    ]
    record = records.model_type(model_type)
    family = None if record is None else record.mrope
    if family is None:
        if found:
            raise ValueError(
                f"M-RoPE keys {found} in a config of model_type {model_type!r}: posenc "
                f"reproduces the M-RoPE of model types {_mrope_types()} only"
            )
        return None
    for key in legacy:  # Qwen2-VL's legacy "mrope" type: default frequencies in sections
        params[key] = "default"
    section = tuple(family.section)
    if "mrope_section" in params:
        given = params.pop("mrope_section")
        if not isinstance(given, (list, tuple)) or len(given) != 3:
            raise ValueError(f"mrope_section must be three ints, got {given!r}")
        section = tuple(given[i] for i in family.order)  # as (t, h, w)
    # Qwen3-Omni's configs also carry "interleaved", which its config class ignores
    interleaved = family.interleaved
    names = ("mrope_interleaved", "interleaved") if interleaved else ("mrope_interleaved",)
    for name in names:
        flag = params.pop(name, interleaved)
        if flag != interleaved:
            raise ValueError(
                f"{name}={flag!r} conflicts with model_type {model_type!r}, whose transformers "
                f"rotary embedding {'always' if interleaved else 'never'} interleaves"
            )
    return {
        "mrope_section": section,
        "mrope_interleaved": interleaved,
        "mrope_spatial_first": family.spatial_first,
    }


def fit_interleaved(section: tuple[int, ...], n_pairs: int) -> tuple[int, int, int]:
    """The (t, h, w) pairs an interleaved family's rotary embedding gives ``n_pairs``
    pairs from a config's ``mrope_section``: transformers starts with every pair on t and
    moves pair i to h where ``i % 3 == 1`` and ``i < 3 s_h`` (to w: ``i % 3 == 2``, ``i <
    3 s_w``), within the pairs there are; ``s_t`` is never read. posenc's section counts
    the pairs each axis gets, which is the same assignment.

    Example:
        >>> fit_interleaved((24, 20, 20), 32)  # Qwen3-Omni's talker: 32 pairs
        (11, 11, 10)
        >>> fit_interleaved((11, 11, 10), 128)  # a head of 256 channels
        (107, 11, 10)
    """
    height = len(range(1, min(3 * section[1], n_pairs), 3))
    width = len(range(2, min(3 * section[2], n_pairs), 3))
    return (n_pairs - height - width, height, width)


def _mrope_types() -> list[str]:
    return sorted(name for name, record in records.MODEL_TYPES.items() if record.mrope)
