"""``context-extension``: run a RoPE model trained at L at s·L with each context-extension
scaling, zero-shot and after a short fine-tune at s·L.

Compared: plain RoPE (``none``), position interpolation (``linear``; Chen et al. 2023,
"Extending context window of large language models via positional interpolation",
arXiv:2306.15595), NTK-aware base scaling (``ntk``; bloc97 2023) and its dynamic variant
(``dynamic``), and YaRN (``yarn``; Peng et al. 2023, arXiv:2309.00071). Every scaling starts
from the same trained weights (the RoPE language model of ``extrapolation``); only the
rotation frequencies change. Perplexity and bits per byte are measured on the validation bytes
``extrapolation`` scores (non-overlapping chunks of s·L), so ``none`` zero-shot at s·L is
``extrapolation``'s RoPE number at that length.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from ...models import TransformerLM
from ..data.batches import VOCAB_SIZE, lm_batch
from ..data.tasks import TaskBatch
from ..measuring.language_model import (
    language_model,
    lm_records,
    validation_loss,
    validation_windows,
)
from ..reporting import plotting
from ..reporting.rows import Rows, leader, significant
from ..running.context import RunContext, unit_name
from ..running.progress import Task
from ..running.training import TrainConfig
from .base import Experiment, Layout

__all__ = [
    "EXPERIMENT",
    "NAME",
    "SCALINGS",
    "figure",
    "finetune_config",
    "run",
    "scaling_spec",
    "summary",
]

NAME = "context-extension"

#: the scalings compared (``none``: plain RoPE)
SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn")
#: the scalings whose parameters include the training length
_TAKE_ORIGINAL = frozenset({"dynamic", "yarn"})


def scaling_spec(scaling: str, factor: int, train_length: int) -> str | dict[str, Any]:
    """The encoding spec of RoPE with ``scaling`` by ``factor`` for a model trained at
    ``train_length`` tokens.

    Args:
        scaling: one of :data:`SCALINGS`.
        factor: s, the context's growth.
        train_length: L (``original_max_position_embeddings`` of ``dynamic`` and ``yarn``).

    Returns:
        ``{"name": "rope", "scaling": <Hugging Face rope_parameters>}``; ``"rope"`` for
        ``none``.

    Raises:
        ValueError: for a scaling not in :data:`SCALINGS`.
    """
    if scaling not in SCALINGS:
        raise ValueError(f"unknown scaling {scaling!r}; choose one of {SCALINGS}")
    if scaling == "none":
        return "rope"
    params: dict[str, Any] = {"rope_type": scaling, "factor": factor}
    if scaling in _TAKE_ORIGINAL:
        params["original_max_position_embeddings"] = train_length
    return {"name": "rope", "scaling": params}


def finetune_config(ctx: RunContext, factor: int) -> TrainConfig:
    """The fine-tune recipe at ``factor``·L: the preset's, with its batch divided by
    ``factor`` (as many tokens a step as in pre-training), rounded up to a multiple of the
    number of processes (each takes an equal share of the rows).

    Args:
        ctx: the run (its preset and processes).
        factor: s.

    Returns:
        ``preset.finetune`` with its ``batch_size`` changed.
    """
    size = ctx.place.size
    rows = max(1, ctx.preset.finetune.batch_size // factor)
    rows = -(-rows // size) * size
    return dataclasses.replace(ctx.preset.finetune, batch_size=rows)


def run(ctx: RunContext) -> None:
    """Load (or train) the RoPE language model of every seed; measure each scaling and
    factor zero-shot and fine-tuned."""
    for seed in ctx.preset.seeds:
        ctx.unit(unit_name(NAME, "rope", f"seed{seed}"), functools.partial(_measure, ctx, seed))


def _measure(ctx: RunContext, seed: int) -> list[dict[str, Any]]:
    preset = ctx.preset
    length = preset.train_length
    trained = language_model(ctx, "rope", seed)
    weights = trained.state_dict()  # the encodings' tables are not in it: weights only
    records: list[dict[str, Any]] = []
    windows = {f: validation_windows(ctx, f * length, "chunks") for f in preset.extension_factors}
    total = 2 * len(preset.extension_scalings) * sum(windows.values())
    bar = ctx.progress.task("evaluate context extension", total)
    for factor in preset.extension_factors:
        for scaling in preset.extension_scalings:
            spec = scaling_spec(scaling, factor, length)
            model = ctx.new_model(preset.model, spec, seed, VOCAB_SIZE)
            model.load_state_dict(weights)
            model.eval()
            base = {
                "experiment": NAME,
                "encoding": "rope",
                "seed": seed,
                "train_length": length,
                "eval_length": factor * length,
                "scaling": scaling,
                "factor": factor,
                "mode": "chunks",
            }
            records += _records(ctx, model, {**base, "stage": "zero-shot"}, bar)
            model = _finetune(ctx, model, scaling, factor, seed)
            records += _records(ctx, model, {**base, "stage": "fine-tuned"}, bar)
    bar.close()
    return records


def _finetune(
    ctx: RunContext, model: TransformerLM, scaling: str, factor: int, seed: int
) -> TransformerLM:
    """``model`` fine-tuned in place at ``factor``·L on the training bytes."""
    config = finetune_config(ctx, factor)
    eval_length = factor * ctx.preset.train_length
    train_bytes = ctx.corpus.train

    def make_batch(generator: torch.Generator) -> TaskBatch:
        return lm_batch(train_bytes, config.batch_size, eval_length, generator)

    name = unit_name("train", "extend", scaling, f"x{factor}", f"seed{seed}")
    return ctx.trained(name, model, make_batch, config, seed)


def _records(
    ctx: RunContext, model: TransformerLM, base: dict[str, Any], bar: Task
) -> list[dict[str, Any]]:
    """Perplexity and bits per byte of ``model`` at ``base["eval_length"]``, on the bytes
    ``extrapolation`` scores
    (:func:`~posenc.arena.measuring.language_model.validation_loss`, as it does)."""
    return lm_records(base, validation_loss(ctx, model, base["eval_length"], "chunks", bar))


# --- the report ------------------------------------------------------------------------


def figure(measured: Rows) -> Any:
    """Perplexity at ``s·L`` against the factor ``s`` per RoPE scaling, panels zero-shot and
    fine-tuned, log y."""
    rows, metric = measured.metric()
    stages = plotting.values(rows, "stage")
    fig, axes = plotting.new_figure(len(stages), "Context extension: RoPE scalings at s·L")
    colors = plotting.colors(rows, "scaling")
    for ax, stage in zip(axes, stages, strict=False):
        here = [r for r in rows if r.get("stage") == stage]
        for scaling in plotting.values(here, "scaling"):
            mine = [r for r in here if r.get("scaling") == scaling]
            label = (
                str(scaling)
                if any(r["mean"] is not None for r in mine)
                else f"{scaling} (cannot run)"
            )
            line = plotting.line(ax, mine, "factor", color=colors[scaling], label=label)
            if line is None:
                ax.plot([], [], color=colors[scaling], label=label)
        plotting.log_y(ax)
        factors = plotting.values(here, "factor")
        ax.set_xticks(factors, [f"×{f}" for f in factors])
        ax.set_title(f"{stage}" if stage is not None else "")
        ax.set_xlabel("context factor s (evaluated at s·L tokens)")
        ax.set_ylabel(plotting.unit(metric))
        ax.legend(fontsize="small")
    if not rows:
        plotting.empty(axes[0])
    return fig


#: the stages of each factor, in the order they run
STAGES = ("zero-shot", "fine-tuned")


def stage_rows(rows: list[dict[str, Any]], factor: float, stage: str) -> list[dict[str, Any]]:
    """The rows of ``factor`` at ``stage`` that ran (one per scaling)."""
    return [
        r
        for r in rows
        if r.get("factor") == factor and r.get("stage") == stage and r["mean"] is not None
    ]


def summary(measured: Rows) -> list[str]:
    """Per factor and stage, the best scaling and how it compares with no scaling."""
    rows, metric = measured.metric()
    out = []
    for factor in sorted({r["factor"] for r in rows if "factor" in r}):
        parts = []
        for stage in STAGES:
            here = stage_rows(rows, factor, stage)
            if not here:
                continue
            best = min(here, key=lambda r: r["mean"])
            none = next((r for r in here if r.get("scaling") == "none"), None)
            text = f"best {stage} {leader(here, key='scaling')} ({metric}"
            if none is not None and best is not none:
                text += (
                    f" vs {significant(none['mean'])} with none, ×{best['mean'] / none['mean']:.2g}"
                )
            parts.append(text + ")")
        if parts:
            out.append(f"Context extension ×{factor}: " + "; ".join(parts) + ".")
    return out


EXPERIMENT = Experiment(
    name=NAME,
    title="Context extension",
    run=run,
    layout=Layout(("stage",), "factor", ("eval_length",), ("perplexity", "bits_per_byte", "loss")),
    figure=figure,
    alt="Perplexity at s times L against the factor s per RoPE scaling",
    summary=summary,
)
