"""The extension plans of an inspected checkpoint: what :func:`~posenc.hf.extend_context`
would write into its config for each method, and the RoPE posenc builds from the result
(:func:`extension_plans`, called by :func:`~posenc.hf.inspect.checkpoint.inspect_checkpoint`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ...rotary.mrope import MRoPE
from ...rotary.rope import RoPE
from ..extend import EXTEND_METHODS, extension_updates, scaled_layer_type
from ..keys import config_getter
from ..mrope import language_path
from ..rope import rope_from_hf_config

__all__ = ["ExtensionPlan", "extension_plans"]


@dataclasses.dataclass(frozen=True)
class ExtensionPlan:
    """What ``extend_context(model, method, factor)`` would set, and the RoPE it gives.

    Attributes:
        method: one of :data:`~posenc.hf.EXTEND_METHODS`.
        factor: target / original length.
        updates: the config keys and values it sets (``rope_parameters``,
            ``max_position_embeddings``, ...), as :func:`~posenc.hf.extend.extension_updates`.
        rope: the :class:`~posenc.rotary.RoPE` of the updated config, None when posenc cannot
            build it (``note`` says why: M-RoPE takes no length-dependent scaling).
        note: empty, or why ``rope`` is None.
    """

    method: str
    factor: float
    updates: dict[str, Any]
    rope: RoPE | None
    note: str = ""


def extension_plans(
    config: dict[str, Any], language: dict[str, Any], factor: float, model_type: str, rope: RoPE
) -> tuple[tuple[ExtensionPlan, ...], str]:
    """One :class:`ExtensionPlan` per method of :data:`~posenc.hf.EXTEND_METHODS` for an
    unscaled rotary ``config`` (its ``language`` model's config, :func:`language_path`)
    extended by ``factor``, and a note: the methods refused and why, and whether
    ``extend_context`` takes the loaded model. A RoPE per layer type is scaled in its
    ``full_attention`` layers only."""
    plans, refused = [], []
    for method in EXTEND_METHODS:
        try:
            updates = extension_updates(language, method, factor)
        except ValueError as error:  # the report still shows, with the reason
            refused.append(f"{method}: {error}")
            continue
        updated = copy.deepcopy(config)
        into = updated  # the language model's config, where the RoPE keys go
        for key in language_path(config):
            into = into[key]
        into.update(copy.deepcopy(updates))
        into.pop("rope_scaling", None)  # rope_parameters replaces it, as in transformers 5
        layer_type = scaled_layer_type(config_getter(updates))
        built: RoPE | None
        try:
            built = rope_from_hf_config(updated, layer_type=layer_type)
            note = "" if layer_type is None else f"the {layer_type} layers only; the others kept"
        except ValueError as error:
            built, note = None, f"posenc cannot build it: {error}"
        plans.append(ExtensionPlan(method, factor, updates, built, note))
    notes = [f"no plan for {why}" for why in refused]
    if plans and (model_type == "gpt_neox" or isinstance(rope, MRoPE)):
        notes.append(
            "extend_context rewrites model.model.rotary_emb (Llama family); this model keeps "
            "its rotary embedding elsewhere, so it refuses the model: load it with the "
            "updated config instead"
        )
    return tuple(plans), "; ".join(notes)
