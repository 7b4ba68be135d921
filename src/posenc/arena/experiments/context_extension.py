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
from ..batches import VOCAB_SIZE, lm_batch
from ..progress import Task
from ..runner import RunContext, unit_name
from ..tasks import TaskBatch
from ..train import TrainConfig
from .language_model import language_model, lm_records, validation_loss, validation_windows

__all__ = ["NAME", "SCALINGS", "finetune_config", "run", "scaling_spec"]

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
    ``extrapolation`` scores (:func:`.language_model.validation_loss`, as it does)."""
    return lm_records(base, validation_loss(ctx, model, base["eval_length"], "chunks", bar))
