"""Extending a model that already ships scaled: a larger factor over the same original
length (:func:`rescaled_rope`, called by :func:`~posenc.hf.extend.extension_updates`).

Most of the models people extend ship with a RoPE scaling already: Llama 3.1-3.3
(``llama3``, factor 8 over 8,192), YaRN-scaled Qwen, DeepSeek and gpt-oss, linear Gemma 3.
Their scalings are functions of a factor over an original length, so the published way to
extend them further is the same scaling with a larger factor over the same original length:

- ``linear`` (position interpolation, Chen et al. 2023, arXiv:2306.15595): positions divided
  by the product of the factors;
- ``yarn`` (Peng et al. 2023, arXiv:2309.00071; Qwen2.5's and DeepSeek-V3's long-context
  recipes set its factor for the length they serve, over the same original length): its
  ramp and attention temperature follow the new factor;
- ``llama3`` (Meta's Llama 3.1 recipe): the same band of frequencies, divided by the new
  factor below it;
- ``dynamic`` (NTK-aware by length, bloc97 2023): its base grows faster past the original.

The context grows by ``factor`` (``max_position_embeddings`` times it; dynamic scaling keeps
it, as it starts past it) and the scaling's factor is multiplied by it; every other key of
the model's scaling is kept. Refused by name: another method than the model's scaling (no
recipe stacks two), a different original length, LongRoPE (Ding et al. 2024,
arXiv:2402.13753: its rescale factors are searched per length, none follows from a factor),
and an explicit YaRN ``attention_factor`` that would not follow the new factor unless given.
"""

from __future__ import annotations

from typing import Any

from ..rotary.scaling import parse_scaling
from .keys import Getter, rope_base_keys

__all__ = ["RESCALABLE", "rescaled_rope"]

#: the scalings a larger factor over the same original length extends
RESCALABLE = ("linear", "dynamic", "yarn", "llama3")


def rescaled_rope(
    get: Getter,
    current: dict[str, Any],
    method: str,
    factor: float,
    original: int | None,
    params: dict[str, Any],
) -> tuple[dict[str, Any], int]:
    """The RoPE dict of ``current`` (a scaled one) extended by ``factor`` with ``method``,
    and the new ``max_position_embeddings``.

    Raises:
        ValueError: the model's scaling is not in :data:`RESCALABLE`, ``method`` is not the
            model's scaling, ``original`` differs from the model's, or an explicit
            ``attention_factor`` would be kept for another factor (each named).
    """
    scaling = current.get("rope_type", current.get("type"))
    if scaling not in RESCALABLE:
        raise ValueError(
            f"the model already uses {scaling!r} scaling, which no published recipe extends "
            f"by a factor (LongRoPE's rescale factors are searched per length); extend_context "
            f"extends unscaled models and {', '.join(RESCALABLE)} ones"
        )
    if method != scaling:
        raise ValueError(
            f"the model already uses {scaling!r} scaling: extend it with method={scaling!r} "
            f"(a larger factor over the same original length), not {method!r}"
        )
    own = current.get("original_max_position_embeddings")
    if original is not None and original != own:
        raise ValueError(
            f"original_max_position_embeddings={original!r}: a scaled model keeps its own "
            f"original length ({own!r}); leave it out"
        )
    if "attention_factor" in current and "attention_factor" not in params:
        raise ValueError(
            f"the model's {scaling} scaling sets attention_factor="
            f"{current['attention_factor']!r}, which does not follow the new factor: pass "
            "attention_factor=... (or drop it from the config to have YaRN's own)"
        )
    # the base and rotary fraction where transformers reads them (a legacy config.json
    # keeps rope_theta at the top level), as an unscaled model's extension writes them
    new = {**rope_base_keys(get, current), **current, **params}
    new["factor"] = float(current["factor"]) * factor
    new.pop("type", None)
    new["rope_type"] = scaling
    not_scaling = ("mrope_section", "mrope_interleaved", "rope_theta", "partial_rotary_factor")
    checked = {k: v for k, v in new.items() if k not in not_scaling}
    if scaling == "dynamic" and "original_max_position_embeddings" not in checked:
        checked["original_max_position_embeddings"] = get("max_position_embeddings")
    parse_scaling(checked)  # strict: unknown keys and bad values raise, naming them
    current_max = get("max_position_embeddings")
    new_max = current_max if scaling == "dynamic" else int(current_max * factor)
    return new, new_max
