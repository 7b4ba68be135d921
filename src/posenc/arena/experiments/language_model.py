"""The byte-level language model that ``extrapolation``, ``context-extension`` and
``nope-needs-causality`` share: one per encoding and seed, trained once per run at length L
on the corpus and reused by each experiment that needs it."""

from __future__ import annotations

from typing import Any

import torch

from ...models import TransformerLM
from ..batches import VOCAB_SIZE, lm_batch
from ..runner import RunContext, unit_name
from ..tasks import TaskBatch

__all__ = ["encoding_spec", "language_model"]


def encoding_spec(name: str, max_positions: int) -> str | dict[str, Any]:
    """The spec of encoding ``name`` for a model trained on ``max_positions`` tokens: the
    name, or for ``learned`` a table of exactly ``max_positions`` rows (it cannot go past
    them; the experiments report that as cannot-run)."""
    if name == "learned":
        return {"name": name, "max_positions": max_positions}
    return name


def language_model(ctx: RunContext, encoding: str, seed: int) -> TransformerLM:
    """The causal byte-level model with ``encoding``, trained with ``seed`` at the preset's
    length L on the training bytes (unit ``train--lm--<encoding>--seed<seed>``)."""
    preset = ctx.preset
    length = preset.train_length
    model = ctx.new_model(preset.model, encoding_spec(encoding, length), seed, VOCAB_SIZE)
    train_bytes = ctx.corpus.train

    def make_batch(generator: torch.Generator) -> TaskBatch:
        return lm_batch(train_bytes, preset.lm.batch_size, length, generator)

    return ctx.trained(
        unit_name("train", "lm", encoding, f"seed{seed}"), model, make_batch, preset.lm, seed
    )
