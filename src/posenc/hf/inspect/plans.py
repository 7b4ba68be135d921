"""The extension plans of an inspected checkpoint: what :func:`~posenc.hf.extend_context`
would write into its config for each method, and the RoPE posenc builds from the result
(:func:`extension_plans`, called by :func:`~posenc.hf.inspect.checkpoint.inspect_checkpoint`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ...rotary.rope import RoPE
from ..extend import EXTEND_METHODS, extension_updates, rope_type_refusal, scaled_layer_type
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
        rope: the :class:`~posenc.rotary.RoPE` of the updated config (of its
            ``full_attention`` layers, with a RoPE per layer type).
        note: empty, or which layers the plan scales.
    """

    method: str
    factor: float
    updates: dict[str, Any]
    rope: RoPE
    note: str = ""


def extension_plans(
    config: dict[str, Any],
    language: dict[str, Any],
    factor: float,
    methods: tuple[str, ...] = EXTEND_METHODS,
) -> tuple[tuple[ExtensionPlan, ...], str]:
    """One :class:`ExtensionPlan` per method of ``methods`` (default
    :data:`~posenc.hf.EXTEND_METHODS`; a scaled model: its own scaling's) that
    ``extend_context`` would apply to a rotary ``config`` (its ``language``
    model's config, :func:`language_path`) extended by ``factor``, and a note: the methods
    refused and why (those the model type's config class does not take grouped in one
    clause). A RoPE per layer type is scaled in its ``full_attention`` layers only. Every
    plan's RoPE is built: :func:`~posenc.hf.extend.extension_updates` refuses what
    :func:`~posenc.hf.rope_from_hf_config` cannot read."""
    plans, refused = [], []
    by_type: dict[str, list[str]] = {}  # reason -> the methods the model type refuses
    for method in methods:
        reason = rope_type_refusal(config_getter(language)("model_type"), method)
        if reason is not None:
            by_type.setdefault(reason, []).append(method)
            continue
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
        built = rope_from_hf_config(updated, layer_type=layer_type)
        note = "" if layer_type is None else f"the {layer_type} layers only; the others kept"
        plans.append(ExtensionPlan(method, factor, updates, built, note))
    notes = [f"no plan for {', '.join(methods)}: {why}" for why, methods in by_type.items()]
    notes += [f"no plan for {why}" for why in refused]
    return tuple(plans), "; ".join(notes)
