"""A multi-head latent attention model's decoupled RoPE, read from its config:
:func:`latent_rope_from_hf_config` (DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434,
section 2.1.3).

The RoPE of the ``qk_rope_head_dim`` slice is :func:`~posenc.hf.rope_from_hf_config`'s
(its pair layout the ``rope_interleave`` flag's, the records with ``layout="by_flag"``,
DeepSeek-V2's always interleaved);
this adds the slice sizes and, through :class:`~posenc.rotary.LatentRoPE`, the softmax
scale with DeepSeek's ``mscale_all_dim`` temperature.
"""

from __future__ import annotations

from typing import Any

from ..config import check_int
from ..rotary.latent import LatentRoPE
from .keys import config_getter
from .records import model_type as model_type_record
from .records import model_types
from .rope import rope_from_hf_config

__all__ = ["latent_rope_from_hf_config"]


def latent_rope_from_hf_config(config: Any) -> LatentRoPE:
    """The :class:`~posenc.rotary.LatentRoPE` of a latent attention model, from its config.

    Reads ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``rope_interleave`` and the RoPE
    (``rope_parameters``: the YaRN ``factor`` and ``mscale_all_dim`` give the softmax
    scale's temperature, as transformers' attention multiplies ``qk_head_dim ** -0.5`` by
    ``yarn_get_mscale(factor, mscale_all_dim) ** 2``). Equal to transformers' DeepSeek-V3
    attention (``tests/rotary/test_latent.py``); the other model types of the records with
    ``latent`` (:mod:`posenc.hf.records`) share its rotation and scale in transformers 5.24.

    Args:
        config: a transformers config object or its ``config.json`` dict, of a model type
            whose record has ``latent`` (:mod:`posenc.hf.records`: ``deepseek_v2``,
            ``deepseek_v3``, ...).

    Raises:
        ValueError: another model type, a missing or invalid ``qk_nope_head_dim`` or
            ``qk_rope_head_dim``, a ``rope_interleave`` that is not a bool, or whatever
            :func:`~posenc.hf.rope_from_hf_config` refuses (``mscale_all_dim`` under a rope
            type other than YaRN, say), each named.

    Example:
        >>> mla = latent_rope_from_hf_config({"model_type": "deepseek_v3",
        ...     "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rope_theta": 10000.0,
        ...     "max_position_embeddings": 163840,
        ...     "rope_scaling": {"type": "yarn", "factor": 40.0, "mscale": 1.0,
        ...         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}})
        >>> mla.qk_head_dim, mla.rope.config.layout, round(mla.softmax_scale, 6)
        (192, 'interleaved', 0.135234)
    """
    get = config_getter(config)
    model_type = get("model_type")
    record = model_type_record(model_type)
    if record is None or not record.latent:
        raise ValueError(
            f"model_type {model_type!r} has no latent attention that posenc has read; "
            f"accepted: {model_types(latent=True)} (other rotary models: rope_from_hf_config)"
        )
    sizes = {}
    for key in ("qk_nope_head_dim", "qk_rope_head_dim"):
        value = get(key)
        if value is None:
            raise ValueError(f"the config has no {key}, which latent attention needs")
        try:
            check_int(key, value, even=key == "qk_rope_head_dim")
        except TypeError as e:  # a config value of the wrong type is a bad config value
            raise ValueError(str(e)) from None
        sizes[key] = value
    interleave = get("rope_interleave")
    if interleave is not None and not isinstance(interleave, bool):
        raise ValueError(f"rope_interleave must be true or false, got {interleave!r}")
    return LatentRoPE(sizes["qk_nope_head_dim"], rope_from_hf_config(config))
