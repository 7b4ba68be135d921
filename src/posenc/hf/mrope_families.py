"""The Hugging Face model types with M-RoPE, and how each shares its rotary pairs out
between the temporal, height and width ids: :data:`MROPE_FAMILIES`, read off each family's
rotary embedding in transformers 5.24 (``tests/test_hf_mrope.py`` rotates with every one).

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

from typing import Any, NamedTuple

from .keys import COMPOSITE_TEXT, config_getter

__all__ = [
    "MROPE_FAMILIES",
    "MRopeFamily",
    "fit_interleaved",
    "language_config",
    "language_path",
    "mrope_keys",
]


class MRopeFamily(NamedTuple):
    """How one model type shares its pairs out: ``interleaved`` and ``spatial_first`` as
    :class:`~posenc.rotary.mrope.MRopeConfig` names them, the ``section`` (t, h, w) its
    rotary embedding uses when the config has none, and ``order``: where the config's
    ``mrope_section`` lists t, h and w."""

    interleaved: bool
    section: tuple[int, int, int]
    spatial_first: bool = False
    order: tuple[int, int, int] = (0, 1, 2)


_SECTIONED = MRopeFamily(False, (16, 24, 24))
_GLM = MRopeFamily(False, (8, 12, 12))
_INTERLEAVED = MRopeFamily(True, (24, 20, 20))
_QWEN3_5 = MRopeFamily(True, (11, 11, 10))
#: ERNIE's rotary embedding reads mrope_section (h, w, t), default [22, 22, 20]
_ERNIE = MRopeFamily(True, (20, 22, 22), spatial_first=True, order=(2, 0, 1))

#: model_type -> its family, for the composite config and the language model's
MROPE_FAMILIES: dict[str, MRopeFamily] = {
    f"{name}{suffix}": family
    for name, family, suffixes in (
        ("qwen2_vl", _SECTIONED, ("", "_text")),
        ("qwen2_5_vl", _SECTIONED, ("", "_text")),
        ("qwen2_5_omni", _SECTIONED, ("", "_thinker", "_text", "_talker")),
        ("paddleocr_vl", _SECTIONED, ("", "_text")),
        ("glm4v", _GLM, ("", "_text")),
        ("glm4v_moe", _GLM, ("", "_text")),
        ("glm46v", _GLM, ("",)),
        ("glm_ocr", _GLM, ("", "_text")),
        ("glm_image", _GLM, ("", "_text")),
        ("qwen3_vl", _INTERLEAVED, ("", "_text")),
        ("qwen3_vl_moe", _INTERLEAVED, ("", "_text")),
        ("qwen3_omni_moe", _INTERLEAVED, ("", "_thinker", "_text", "_talker_text")),
        ("cosmos3_edge", _INTERLEAVED, ("", "_text")),
        ("hy_v4_vl", _INTERLEAVED, ("", "_text")),
        ("qwen3_5", _QWEN3_5, ("", "_text")),
        ("qwen3_5_moe", _QWEN3_5, ("", "_text")),
        ("qwen4_exp", _QWEN3_5, ("", "_text")),
        ("ernie4_5_vl_moe", _ERNIE, ("", "_text")),
    )
    for suffix in suffixes
}

#: the keys down from a composite M-RoPE config to its language model's, in order (a
#: Qwen-Omni config holds a thinker, which holds the text model)
_LANGUAGE_KEYS = ("thinker_config", "text_config")


def language_path(config: Any) -> tuple[str, ...]:
    """The keys from a composite model's config down to its language model's config:
    ``("thinker_config", "text_config")`` for Qwen-Omni, ``("text_config",)`` for Qwen-VL,
    Gemma 3 and Llama 4 (:data:`~posenc.hf.keys.COMPOSITE_TEXT`), ``()`` for a text config
    or any other model.

    Example:
        >>> language_path({"model_type": "qwen2_5_omni", "thinker_config": {
        ...     "model_type": "qwen2_5_omni_thinker", "text_config": {"head_dim": 128}}})
        ('thinker_config', 'text_config')
    """
    path: list[str] = []
    get = config_getter(config)
    for key in _LANGUAGE_KEYS:
        composite = get("model_type") in MROPE_FAMILIES or get("model_type") in COMPOSITE_TEXT
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
    family = MROPE_FAMILIES.get(model_type)
    if family is None:
        if found:
            raise ValueError(
                f"M-RoPE keys {found} in a config of model_type {model_type!r}: posenc "
                f"reproduces the M-RoPE of model types {sorted(MROPE_FAMILIES)} only"
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
