"""``posenc conform``: does an engine rotate a model the way posenc reads its config?

For each RoPE layer type of a Hugging Face config, posenc's float64 rotation
(:func:`~posenc.engines.compare.reference_tables` of :func:`posenc.hf.rope_from_hf_config`)
against each engine's, at positions spread up to the context and past it
(:func:`~posenc.engines.compare.probe_positions`), as one sequence that long; a scaling
that depends on the length (``dynamic``, ``longrope``) is also compared as a sequence
within the original length. Each row: the largest error, the first position past
float32's tolerance, and what differs there.

Engines (:data:`ENGINES`), each given every job at once: transformers, the model type's
own rotary embedding (:mod:`~posenc.engines.hf_engine`); vLLM, its ``get_rope`` in its own
environment (:mod:`~posenc.engines.vllm_engine`); llama.cpp, the GGUF metadata its
converter writes, by llama.cpp's rules (:mod:`~posenc.engines.llama_engine`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..arguments import check_int
from ..hf.inspect.checkpoint import read_config
from ..hf.keys import LAYER_TYPES, config_getter, nested_rope_keys
from ..hf.mrope import language_config
from ..hf.rope import rope_from_hf_config
from ..rotary.dca import DualChunkRoPE
from ..rotary.rope import RoPE
from ..terminal import Fitted, render
from .compare import (
    Answer,
    Job,
    check_past,
    compare_tables,
    pair_count,
    probe_positions,
    reference_tables,
)
from .hf_engine import transformers_tables
from .llama_engine import llama_tables
from .vllm_engine import vllm_tables
from .worker import EngineUnavailable

__all__ = ["ENGINES", "ConformRow", "conform", "render_rows"]

#: an engine: ``(config, jobs) -> answers``; raises EngineUnavailable to skip them all
Engine = Callable[[Any, list[Job]], list[Answer]]


def _transformers(config: Any, jobs: list[Job]) -> list[Answer]:
    """transformers' answer to each job; a model type whose rotary class it cannot build
    or read is a ``"not run: ..."`` row."""
    answers: list[Answer] = []
    for rope, positions, layer_type in jobs:
        try:
            tables, ran = transformers_tables(
                config, positions, layer_type, pair_count(rope, positions)
            )
        except ValueError as why:
            answers.append(f"not run: {why}")
            continue
        answers.append((tables, ran, positions))
    return answers


#: the engines compared, by name
ENGINES: dict[str, Engine] = {
    "transformers": _transformers, "vllm": vllm_tables, "llama.cpp": llama_tables,
}  # fmt: skip

#: what an engine that rotates every key by its own position misses of ``dca``
DCA_IGNORED = "dual_chunk_attention_config (not read: plain RoPE)"


@dataclass(frozen=True)
class ConformRow:
    """One engine's rotation of one layer type, as one sequence, against posenc's.

    Attributes:
        layer_type: the config's layer type (per-layer-type ``rope_parameters``), or None.
        length: the length of the sequence compared (its last position + 1).
        engine: the engine's name (:data:`ENGINES`).
        ran: what the engine ran (its rotary class) and the scaling posenc read, or why it
            did not run (``"not run: ..."``; then the numbers are NaN and None).
        max_error: the largest error of its ``(cos, sin)`` against float64.
        first_position: the first probe position past float32's tolerance, or None.
        differs_on: what differs there, or None.
    """

    layer_type: str | None
    length: int
    engine: str
    ran: str
    max_error: float
    first_position: int | None
    differs_on: str | None


def conform(
    config: Any, past: float = 2.0, engines: dict[str, Engine] | None = None
) -> list[ConformRow]:
    """Every RoPE layer type of ``config`` (a transformers config object, or the path of a
    ``config.json`` or its folder), each engine's rotation against posenc's.

    Args:
        config: the model's config; its ``model_type`` picks each engine's class.
        past: how far past the context to probe, in contexts (2: up to twice it); a
            finite number >= 1 whose last position stays within 2**53.
        engines: the engines to compare, a non-empty dict of name -> engine
            (``(config, jobs) -> answers``, one answer per job); None: :data:`ENGINES`.

    Raises:
        ValueError: a config posenc does not read (:func:`~posenc.hf.rope_from_hf_config`
            names why; a ``max_position_embeddings`` or head count below 1 among them), one
            transformers' class cannot be built from, a ``past`` out of range, an empty
            ``engines``, or an engine that answers another number of jobs.
        TypeError: a config that is neither a config object nor a path, an ``engines`` that
            is not a dict of callables by name, a key of the wrong type, each named.
    """
    check_past(past)
    engines = _check_engines(engines)
    config = _config_object(config)
    jobs = _jobs(config, past)
    get = config_getter(language_config(config))
    rows = []
    for name, engine in engines.items():
        try:
            answers = engine(config, jobs)
        except EngineUnavailable as why:
            answers = [str(why)] * len(jobs)
        if not isinstance(answers, list) or len(answers) != len(jobs):
            count = len(answers) if isinstance(answers, list) else type(answers).__name__
            raise ValueError(
                f"engines[{name!r}] must answer a list of one answer per job ({len(jobs)}), "
                f"got {count}"
            )
        for (rope, positions, layer_type), answer in zip(jobs, answers, strict=True):
            context = _context(get, rope)
            rows.append(_row(name, rope, positions, layer_type, context, answer))
    return rows


def _check_engines(engines: Any) -> dict[str, Engine]:
    """``engines`` checked (a non-empty dict of callables by name), or :data:`ENGINES`."""
    if engines is None:
        return ENGINES
    if not isinstance(engines, Mapping):
        raise TypeError(
            f"engines must be a dict of name -> engine (or None: every engine), got "
            f"{type(engines).__name__} ({engines!r})"
        )
    if not engines:
        raise ValueError(f"engines must name at least one engine, got {{}}; known: {list(ENGINES)}")
    for name, engine in engines.items():
        if not isinstance(name, str) or not callable(engine):
            raise TypeError(
                f"engines must map names (str) to engines ((config, jobs) -> answers), got "
                f"{name!r}: {engine!r}"
            )
    return dict(engines)


def _jobs(config: Any, past: float) -> list[Job]:
    """The comparisons to make: every layer type, as a sequence past the context and, for
    a length-dependent scaling, one within the original length. Per-layer-type RoPEs that
    are layer types (Gemma 3's) are compared where the config's ``layer_types`` uses them;
    RoPEs by another label (DeepSeek-V4's ``main`` and ``compress``) all."""
    get = config_getter(language_config(config))
    types: list[str | None] = [*nested_rope_keys(get("rope_parameters") or {})] or [None]
    used = get("layer_types")
    if used is not None and types != [None] and set(types) <= set(LAYER_TYPES):
        types = [t for t in types if t in set(used)]  # the models build only those used
    if not types:
        raise ValueError(
            f"the config's layer_types {sorted(set(used))} use none of its RoPEs "
            f"{nested_rope_keys(get('rope_parameters'))}: nothing to compare"
        )
    jobs = []
    for layer_type in types:
        rope = rope_from_hf_config(config, layer_type=layer_type)
        original = rope.scaling.to_dict().get("original_max_position_embeddings")
        context = _context(get, rope)
        edges = tuple(e for e in (original, getattr(rope, "chunk_len", None)) if e)
        positions = probe_positions(context, past, edges)
        if rope.depends_on_length and original is not None:  # also a sequence within it
            jobs.append((rope, positions[positions < original], layer_type))
        jobs.append((rope, positions, layer_type))
    return jobs


def _context(get: Any, rope: RoPE) -> int:
    """The model's context: ``max_position_embeddings`` (an int >= 1), else (absent) the
    scaling's original length, else 4096."""
    given = get("max_position_embeddings")
    if given is not None:
        check_int("max_position_embeddings", given)
        return int(given)
    original = rope.scaling.to_dict().get("original_max_position_embeddings")
    return int(original or 4096)


def _row(name: str, rope: RoPE, positions: torch.Tensor, layer_type: str | None,
         context: int, answer: Answer) -> ConformRow:  # fmt: skip
    """One job's row: its engine's answer against posenc's tables. An engine that ran
    only the first positions (vLLM: below its ``max_model_len``) serves no longer
    sequence: it is compared as a sequence of the positions it ran."""
    length = int(positions.max()) + 1
    if isinstance(answer, str):  # the engine did not run it
        return ConformRow(layer_type, length, name, answer, math.nan, None, None)
    got, ran, ran_at = answer
    if ran_at.numel() < positions.numel():
        length = int(ran_at.max()) + 1
        ran += f", up to {length - 1}"
    found = compare_tables(got, reference_tables(rope, ran_at, length), ran_at,
                           rope.inv_freq(length))  # fmt: skip
    if found.first_position is not None:
        found = replace(found, differs_on=_explain(rope, got, ran_at, found.differs_on, context))
    ran = f"{ran} ({rope.scaling.rope_type})"
    return ConformRow(layer_type, length, name, ran, found.max_error, found.first_position,
                      found.differs_on)  # fmt: skip


def _explain(rope: RoPE, got: tuple[torch.Tensor, torch.Tensor], positions: torch.Tensor,
             found: str | None, context: int) -> str | None:  # fmt: skip
    """The config key behind a disagreement, where posenc can tell it: ``dca`` that an
    engine ran as plain RoPE; a length-dependent scaling whose frequencies the engine fixed
    at one length (the context, or the context times the factor: vLLM's LongRoPE picks its
    long factors by ``max_model_len``, its dynamic NTK computes the base at
    ``max_position_embeddings · factor``); else what :func:`compare_tables` found."""
    if isinstance(rope, DualChunkRoPE):
        return DCA_IGNORED
    if rope.depends_on_length:
        factor = rope.scaling.to_dict().get("factor") or 1
        for length in (context, int(context * factor)):
            fixed = reference_tables(rope, positions, length)
            if compare_tables(got, fixed, positions, rope.inv_freq(length)).first_position is None:
                kind = rope.scaling.rope_type
                return f"{kind}: fixed at a {length}-token sequence, at every length"
    return found


def render_rows(rows: list[ConformRow]) -> str:
    """The rows (:func:`conform`'s) as a table.

    Raises:
        TypeError: ``rows`` is not a list of :class:`ConformRow`.
    """
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, ConformRow) for r in rows):
        raise TypeError(f"rows must be a list of ConformRow (conform's), got {rows!r:.80}")
    header = ["layer type", "length", "engine", "ran", "max error", "first past fp32",
              "differs on"]  # fmt: skip
    cells = []
    for r in rows:
        first = "-" if r.first_position is None else str(r.first_position)
        error = "-" if math.isnan(r.max_error) else f"{r.max_error:.1e}"
        cells.append([r.layer_type or "-", str(r.length), r.engine, r.ran, error, first,
                      r.differs_on or "-"])  # fmt: skip
    # a row per line where "ran" and "differs on" have room, else stacked under the engine
    return render(Fitted(header, cells, prose=("ran", "differs on"), key=2))


#: the sizes posenc reads from a config.json, each an int >= 1 where given
_SIZE_KEYS = ("hidden_size", "num_attention_heads", "head_dim", "n_embd", "n_head",
              "max_position_embeddings")  # fmt: skip


def _config_object(config: Any) -> Any:
    """A transformers config object from ``config`` (one already, or a path); the keys
    posenc reads are checked first, by name, and whatever transformers' config class
    refuses is a ValueError naming the file."""
    if isinstance(config, (str, Path)):
        import transformers

        file, raw = read_config(config, "config")
        if "model_type" not in raw:
            raise ValueError(f"config {str(file)!r} has no model_type")
        get = config_getter(language_config(raw))
        for key in _SIZE_KEYS:  # before transformers divides by them
            if get(key) is not None:
                check_int(key, get(key))
        try:
            return transformers.AutoConfig.for_model(**raw)
        except Exception as why:  # a third-party class's checks: any exception it raises
            raise ValueError(
                f"{str(file)!r}: transformers' config class for model_type "
                f"{raw['model_type']!r} refuses it ({type(why).__name__}: {why})"
            ) from why
    if isinstance(config, dict) or not hasattr(config, "model_type"):
        raise TypeError(
            "config must be a transformers config object or the path of a config.json, got "
            f"{type(config).__name__}"
        )
    return config
