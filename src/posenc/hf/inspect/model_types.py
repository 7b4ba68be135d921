"""The model types :func:`posenc.hf.inspect.checkpoint.inspect_checkpoint` knows, and how
each maps to posenc: rotary ones read by :func:`~posenc.hf.rope_from_hf_config`, ALiBi
(BLOOM; Press et al. 2022, arXiv:2108.12409), T5's relative buckets (Raffel et al. 2020,
arXiv:1910.10683) and learned absolute positions (GPT-2, OPT).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from ...base import Encoding
from ...config import check_int
from ...models.plan import LayerPlan
from ...models.spec import LayerSpec, describe_encoding
from ...positions.tmrope import TMROPE_FAMILIES
from ..dca import dca_notes
from ..keys import config_getter
from ..layer_plan import layer_plan
from ..mrope import language_config
from ..records import MODEL_TYPES, check_not_refused
from ..records import model_type as model_type_record

__all__ = ["KNOWN_MODEL_TYPES", "NonRotary", "non_rotary", "plan_summary", "rotary_notes"]

#: model types whose rotary embedding rope_from_hf_config reads (a pair layout read off
#: transformers' code, or M-RoPE; :mod:`posenc.hf.records`); rope_from_hf_config refuses, by
#: name, what a config of one of them holds that it does not take
ROTARY_MODEL_TYPES: tuple[str, ...] = tuple(n for n, r in MODEL_TYPES.items() if r.rotary)

#: every model type an inspection reads: the rotary ones and those with another encoding
KNOWN_MODEL_TYPES = tuple(n for n, r in MODEL_TYPES.items() if r.rotary or r.encoding)

#: what transformers' ``T5Config`` uses when ``config.json`` lacks the key
T5_DEFAULTS = {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}


@dataclasses.dataclass(frozen=True)
class NonRotary:
    """A non-rotary checkpoint as a posenc encoding: its name, ``posenc.create`` keywords,
    notes, and what extending its context means."""

    encoding: str
    config: dict[str, Any]
    notes: tuple[str, ...]
    extension: str


def _int(config: dict[str, Any], *keys: str) -> int:
    """The first of ``keys`` the config has, checked to be an int >= 1."""
    for key in keys:
        if config.get(key) is not None:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"config key {key} must be an int, got {value!r}")
            check_int(key, value)
            return value
    raise ValueError(f"the config has none of {list(keys)}")


def non_rotary(config: dict[str, Any], model_type: Any) -> NonRotary | None:
    """The posenc encoding of a non-rotary model type, None for a rotary one.

    Raises:
        ValueError: an unknown (or missing) model type, naming it and the known ones; a
            refused one (:func:`~posenc.hf.records.check_not_refused`), with the reason.
    """
    check_not_refused(model_type)  # known, but its rotation is not posenc's to read
    record = model_type_record(model_type)
    if record is not None and record.rotary:
        return None
    if record is None or record.encoding is None:
        which = f"model_type {model_type!r}" if model_type else "a config without model_type"
        raise ValueError(
            f"posenc does not know {which}; it knows {len(ROTARY_MODEL_TYPES)} rotary model "
            "types (posenc.hf.records: llama, mistral, qwen2, gemma, cohere, deepseek_v3, "
            f"...) and {model_types_without_rope()}"
        )
    encoding = record.encoding
    if encoding == "alibi":
        n_heads = _int(config, "n_head", "num_attention_heads")
        return NonRotary(
            "alibi",
            {"n_heads": n_heads},
            ("ALiBi's geometric slopes, one per head; no position embeddings at all",),
            "ALiBi has no position limit (its bias is linear in distance)",
        )
    if encoding == "t5":
        keys = {"n_heads": _int(config, "num_heads")}
        defaulted: tuple[str, ...] = ()
        for name in ("num_buckets", "max_distance"):
            hf_key = f"relative_attention_{name}"
            if config.get(hf_key) is None:  # older config.json files (t5-small) lack it
                keys[name] = T5_DEFAULTS[hf_key]
                defaulted += (
                    f"{hf_key} is not in the config: transformers' default "
                    f"{T5_DEFAULTS[hf_key]} used",
                )
            else:
                keys[name] = _int(config, hf_key)
        return NonRotary(
            "t5",
            {**keys, "bidirectional": True},
            (
                "the encoder's buckets are bidirectional; the decoder's self-attention uses "
                "the same with bidirectional=False",
                "one learned bias table in the first layer of each stack, shared by its layers",
                *defaulted,
            ),
            f"T5's buckets have no position limit: distances past {keys['max_distance']} "
            "share the last bucket",
        )
    dim = _int(config, "n_embd", "hidden_size")
    max_positions = _int(config, "n_positions", "max_position_embeddings")
    notes: tuple[str, ...] = ("a learned table of absolute positions, one row per position",)
    if model_type == "opt":
        notes += ("OPT's table has 2 extra rows (its positions start at offset 2)",)
    return NonRotary(
        "learned",
        {"dim": dim, "max_positions": max_positions},
        notes,
        f"a learned table stops at {max_positions} positions: there is no row to scale",
    )


def rotary_notes(config: dict[str, Any], model_type: Any) -> list[str]:
    """Notes on what a rotary model's RoPE alone does not show (its layer plan is
    :func:`plan_summary`'s)."""
    notes: list[str] = []
    omni = _omni_note(config, model_type)
    if omni is not None:
        notes.append(omni)
    dca = config_getter(language_config(config))("dual_chunk_attention_config")
    if dca is not None:
        notes += dca_notes(dca)
    if model_type in ("deepseek_v2", "deepseek_v3"):
        notes.append(
            "DeepSeek's attention also multiplies its softmax scale by "
            "yarn_mscale(factor, mscale_all_dim)^2 under yarn: part of the attention, not the "
            "RoPE (posenc.hf.latent_rope_from_hf_config gives it with the decoupled RoPE)"
        )
    return notes


def _omni_note(config: dict[str, Any], model_type: Any) -> str | None:
    """How a Qwen-Omni model numbers its audio, images and video (TMRoPE), with the
    clock its thinker config gives; None for any other model."""
    family = next((f for f in TMROPE_FAMILIES if str(model_type).startswith(f)), None)
    if family is None:
        return None
    thinker = config.get("thinker_config") or config
    clock = {k: thinker.get(k) for k in ("position_id_per_seconds", "seconds_per_chunk")}
    given = ", ".join(f"{k}={v!r}" for k, v in clock.items() if v is not None)
    given = given or "no clock in this config"
    return (
        f"its multimodal ids are TMRoPE's, audio and video on one clock ({given}): "
        f"posenc.positions.tmrope(input_ids, ..., model_type={family!r})"
    )


def plan_summary(config: dict[str, Any]) -> tuple[LayerPlan | None, str | None]:
    """The layer plan of a model whose layers differ, or whose layers attend within a
    window or chunk (:func:`~posenc.hf.layer_plan` of its language model's config), and a
    note that counts its layers by encoding and pattern; ``(None, why it is not read)``
    where it is not; ``(None, None)`` for a model whose every layer is the same and sees
    every key."""
    try:
        plan = layer_plan(language_config(config))
    except ValueError as e:
        return None, f"its layer plan is not read (posenc.hf.layer_plan: {e})"
    rows = Counter(_kind(spec) for spec in plan)
    if len(rows) == 1 and not any(spec.sinks or spec.softcap for spec in plan):
        if not plan[0].pattern.local:
            return None, None
        return plan, (
            f"every layer is {next(iter(rows))} ({len(plan)} layers): the layer plan below "
            "(posenc.hf.layer_plan(config))"
        )
    kinds = ", ".join(f"{n} x {kind}" for kind, n in rows.items())
    return plan, (
        f"the layers differ: {kinds} of {len(plan)} layers; the RoPE above is one of them, "
        "the layer plan below gives every layer's (posenc.hf.layer_plan(config))"
    )


def _kind(spec: LayerSpec) -> str:
    """``"rope window 128"``, ``"nope full"``: a layer's encoding by name and its pattern."""
    encoding = spec.encoding  # layer_plan gives built encodings, or None
    name = encoding.info.name if isinstance(encoding, Encoding) else describe_encoding(encoding)
    return f"{name} {spec.pattern.describe()}"


def model_types_without_rope() -> list[str]:
    """The model types an inspection reads whose encoding is not RoPE."""
    return sorted(n for n, r in MODEL_TYPES.items() if r.encoding is not None)
