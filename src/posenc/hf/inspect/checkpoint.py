"""What a Hugging Face checkpoint's positions are, read from its ``config.json``:
:func:`inspect_checkpoint`.

Rotary models are read by :func:`~posenc.hf.rope_from_hf_config` (the same function, so
the report and the encoding cannot disagree); ALiBi (BLOOM, Press et al. 2022), T5's
relative buckets (Raffel et al. 2020) and learned absolute positions (GPT-2, OPT) map to
posenc's ``alibi``, ``t5`` and ``learned``. With a target length, the extension plan of an
unscaled rotary model is what :func:`~posenc.hf.extend_context` would write into its config
(:func:`~posenc.hf.extend.extension_updates`, the function ``extend_context`` calls).
The file is read with :mod:`json`: nothing is downloaded and transformers is not imported.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from ...arguments import check_int
from ...models.plan import LayerPlan
from ...rotary.mrope import MRoPE
from ...rotary.rope import RoPE
from ..extend import extend_refusal, scaled_layer_type
from ..keys import config_getter, nested_rope_keys
from ..layer_plan import is_causal
from ..mrope import language_config
from ..records import model_type as model_type_record
from ..rescale import RESCALABLE
from ..rope import rope_from_hf_config
from .model_types import NonRotary, non_rotary, plan_summary, rotary_notes
from .plans import ExtensionPlan, extension_plans
from .windows import reach_note, windows_note

__all__ = ["CheckpointReport", "ExtensionPlan", "RotaryFacts", "inspect_checkpoint"]


@dataclasses.dataclass(frozen=True)
class RotaryFacts:
    """A rotary checkpoint's RoPE, as :func:`~posenc.hf.rope_from_hf_config` builds it.

    Attributes:
        rope: the built :class:`~posenc.rotary.RoPE` (an :class:`~posenc.rotary.MRoPE`
            for Qwen2-VL-style models).
        head_dim, rotary_dim: the head size and how many of its dimensions rotate.
        base: ``rope_theta``.
        layout: ``"half"`` or ``"interleaved"``; ``layout_reason`` says why.
        rope_type: the scaling's type (``"default"``: none); ``scaling`` its parameters.
        original_context: the trained length (None where the config does not record it:
            ``linear`` and ``ntk`` scalings).
        extended_context: the length the scaling reaches (``max_position_embeddings``);
            None when unscaled, or ``dynamic`` (it grows with the sequence).
        attention_factor: the factor on cos and sin at ``extended_context`` (else at the
            original length).
        longest_wavelength: ``2π / min θ_i`` in tokens, at the same length.
        mrope_section: M-RoPE's pairs per (t, h, w) axis, or None.
    """

    rope: RoPE
    head_dim: int
    rotary_dim: int
    base: float
    layout: str
    layout_reason: str
    rope_type: str
    scaling: dict[str, Any]
    original_context: int | None
    extended_context: int | None
    attention_factor: float
    longest_wavelength: float
    mrope_section: tuple[int, ...] | None


@dataclasses.dataclass(frozen=True)
class CheckpointReport:
    """What :func:`inspect_checkpoint` found.

    Attributes:
        path: the ``config.json`` read.
        model_type: the config's ``model_type``.
        encoding: the posenc encoding (``rope``, ``mrope``, ``alibi``, ``t5``, ``learned``).
        config: its keyword arguments for ``posenc.create`` (for rotary ones, the built
            encoding's configuration).
        build: Python code that builds it from the file.
        notes: further facts (the T5 decoder, legacy keys read, ...).
        rotary: the RoPE's facts, None for other encodings.
        target: the target length asked for, or None.
        extensions: one plan per method of :data:`~posenc.hf.EXTEND_METHODS` (empty unless
            a target is given for an unscaled rotary model).
        extension_note: why there are no plans, or what to know about them; empty if none.
        extension_windows: what the plans do to the layers that attend within a window or
            chunk (:func:`~posenc.hf.inspect.windows.windows_note`); empty if none.
        extend_refusal: why :func:`~posenc.hf.extend_context` refuses every model with
            this config (:func:`~posenc.hf.extend.extend_refusal`: Qwen-Omni's nested
            language model), empty where it takes one; the report then shows no ``apply:``
            line.
        plan: the layer plan (:func:`~posenc.hf.layer_plan`) of a model whose layers
            differ or attend within a window or chunk, None otherwise.
    """

    path: Path
    model_type: str
    encoding: str
    config: dict[str, Any]
    build: str
    notes: tuple[str, ...] = ()
    rotary: RotaryFacts | None = None
    target: int | None = None
    extensions: tuple[ExtensionPlan, ...] = ()
    extension_note: str = ""
    extension_windows: str = ""
    extend_refusal: str = ""
    plan: LayerPlan | None = None


def read_config(path: str | Path, name: str = "path") -> tuple[Path, dict[str, Any]]:
    """``(file, contents)`` of a ``config.json``, or of the one in directory ``path`` (the
    caller's parameter ``name``, which every error names).

    Raises:
        ValueError: a missing or unreadable file, or one that is not a JSON object, naming
            the parameter and the path.
        TypeError: a ``path`` that is not a str or Path.
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"{name} must be a str or Path, got {type(path).__name__} ({path!r})")
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {name} {str(file)!r}: {error}") from None
    try:
        contents = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name} {str(file)!r} is not JSON: {error}") from None
    if not isinstance(contents, dict):
        kind = type(contents).__name__
        raise ValueError(f"{name} {str(file)!r} is not a config: it holds {kind}")
    return file, contents


def inspect_checkpoint(path: str | Path, target: int | None = None) -> CheckpointReport:
    """Which position encoding a Hugging Face checkpoint uses, read from its ``config.json``.

    Args:
        path: a ``config.json``, or a model directory holding one. Read locally.
        target: a context length to reach (tokens): adds the extension plans of an unscaled
            rotary model.

    Returns:
        a :class:`CheckpointReport`.

    Raises:
        ValueError: a bad path or file (naming it), a model type posenc does not know
            (naming it and the known ones), a config ``rope_from_hf_config`` rejects, a
            target out of [1, 2**31 - 1].
        TypeError: a ``path`` that is not a str or Path, a ``target`` that is not an int.

    Example:
        >>> import json, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "config.json").write_text(json.dumps({"model_type": "llama",
        ...     "hidden_size": 4096, "num_attention_heads": 32,
        ...     "max_position_embeddings": 8192, "rope_theta": 500000.0}))
        >>> report = inspect_checkpoint(folder, target=32768)
        >>> report.encoding, report.rotary.layout, [p.method for p in report.extensions][:2]
        ('rope', 'half', ['linear', 'ntk'])
    """
    if target is not None:
        check_int("target", target)  # tokens
    file, raw = read_config(path)
    model_type: str = raw.get("model_type") or ""  # "": none, named by non_rotary
    other = non_rotary(raw, model_type)  # raises for unknown model types
    if other is not None:
        return _non_rotary_report(file, model_type, other, target)
    config, language = raw, language_config(raw)
    plan, plan_note = plan_summary(config)
    notes = [] if plan_note is None else [plan_note]
    causal = True if plan is None else is_causal(language)
    reach = None if plan is None else reach_note(plan, causal)
    notes += [] if reach is None else [reach]
    get = config_getter(language)  # DeepSeek-V4's flat keys folded into its two RoPEs
    kinds = nested_rope_keys(get("rope_parameters") or {})
    try:
        layer_type = scaled_layer_type(get)  # the one recipes extend
    except ValueError:  # per-layer RoPEs, none of full attention (DeepSeek-V4's main and
        # compress): the facts of the first; extend_refusal says why nothing is extended
        layer_type = kinds[0]
    rope = rope_from_hf_config(config, layer_type=layer_type)
    if layer_type is not None:
        notes.insert(0, f"a RoPE per layer type {kinds}: the facts above are the {layer_type}'s")
    notes += rotary_notes(config, model_type)
    facts = _rotary_facts(rope, language, model_type)
    given = "" if layer_type is None else f", layer_type={layer_type!r}"
    build = f"config = json.load(open({str(file)!r}))\n"
    build += f"rope = posenc.hf.rope_from_hf_config(config{given})"
    report = CheckpointReport(
        path=file,
        model_type=model_type,
        encoding=rope.info.name,
        config=rope.config.to_dict(),
        build=build,
        notes=tuple(notes),
        rotary=facts,
        target=target,
        extend_refusal=extend_refusal(config) or "",
        plan=plan,
    )
    if target is None:
        return report
    plans, note = _plans(config, language, facts, target)
    windows = ""
    if plans and facts.original_context is not None:  # plans start from a known length
        original = facts.original_context
        windows = windows_note(plan, causal, rope, plans, target, original, layer_type)
    return dataclasses.replace(
        report, extensions=plans, extension_note=note, extension_windows=windows
    )


def _non_rotary_report(
    file: Path, model_type: str, found: NonRotary, target: int | None
) -> CheckpointReport:
    args = ", ".join(f"{k}={v!r}" for k, v in found.config.items())
    return CheckpointReport(
        path=file,
        model_type=model_type,
        encoding=found.encoding,
        config=found.config,
        build=f"encoding = posenc.create({found.encoding!r}, {args})",
        notes=found.notes,
        target=target,
        extension_note=(
            "" if target is None else f"extend_context scales RoPE only; {found.extension}"
        ),
    )


def _rotary_facts(rope: RoPE, language: dict[str, Any], model_type: str) -> RotaryFacts:
    c = rope.config
    scaling = c.scaling.to_dict()
    rope_type = scaling["rope_type"]
    max_positions = language.get("max_position_embeddings")
    original = scaling.get("original_max_position_embeddings")
    if rope_type == "default":
        original = max_positions
    extended = None if rope_type in ("default", "dynamic") else max_positions
    seq_len = extended if extended is not None else original
    inv_freq = rope.inv_freq(seq_len)
    record = model_type_record(model_type)
    if record is not None and record.layout == "by_flag":
        flag = "true" if c.layout == "interleaved" else "false"
        reason = f"model_type {model_type!r}: rope_interleave is {flag} (latent attention)"
    elif c.layout == "interleaved":
        reason = f"model_type {model_type!r} rotates pairs (2i, 2i + 1), read off its code"
    else:
        reason = "Hugging Face's Llama-family pairs (i, i + d/2)"
    mrope = rope.config.mrope_section if isinstance(rope, MRoPE) else None
    return RotaryFacts(
        rope=rope,
        head_dim=c.head_dim,
        rotary_dim=int(c.rotary_dim or c.head_dim),
        base=float(c.base or 0.0),
        layout=c.layout,
        layout_reason=reason,
        rope_type=rope_type,
        scaling={k: v for k, v in scaling.items() if k != "rope_type"},
        original_context=original,
        extended_context=extended,
        attention_factor=rope.attention_factor(seq_len),
        longest_wavelength=float(2 * math.pi / inv_freq.min()),
        mrope_section=None if mrope is None else tuple(mrope),
    )


def _plans(
    config: dict[str, Any], language: dict[str, Any], facts: RotaryFacts, target: int
) -> tuple[tuple[ExtensionPlan, ...], str]:
    """The extension plans to ``target`` tokens, or none and why."""
    if facts.rope_type != "default":
        reach = facts.extended_context
        if facts.rope_type not in RESCALABLE:
            to = f"to {reach} tokens" if reach else "dynamically, past its original length"
            return (), (
                f"already scaled ({facts.rope_type!r}, {to}): no published recipe extends it "
                "by a factor, and extend_context refuses it"
            )
        if reach is None:  # dynamic: tuned for its factor times the original length
            reach = int((facts.original_context or 0) * facts.scaling["factor"])
        if target <= reach:
            return (), (
                f"target {target} is within the {reach} tokens its {facts.rope_type} scaling "
                "reaches: nothing to extend"
            )
        # the model's own scaling, a larger factor over the same original length
        return extension_plans(config, language, target / reach, methods=(facts.rope_type,))
    original = facts.original_context
    if original is None or target <= original:
        return (), f"target {target} is within the original context {original}: nothing to extend"
    return extension_plans(config, language, target / original)
