"""The byte-level language model that ``extrapolation``, ``context-extension`` and
``nope-needs-causality`` share: one per encoding and seed, trained once per run at length L
on the corpus and reused by each experiment that needs it, and the one way they score it
(:func:`validation_loss`, so their numbers on the same model and length are equal)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from ...models import TransformerLM
from ...positions import PositionOutOfRangeError
from ...registry import get
from ..data.batches import VOCAB_SIZE, lm_batch
from ..data.tasks import TaskBatch
from ..running.context import RunContext, unit_name
from ..running.progress import Task
from .evaluate import bits_per_byte, lm_loss, perplexity, windows

__all__ = [
    "cannot_run_note",
    "encoding_spec",
    "language_model",
    "lm_records",
    "train_language_model",
    "validation_loss",
    "validation_windows",
]

#: what each metric of :func:`lm_records` is of a loss in nats per token
_METRICS: dict[str, Callable[[float], float]] = {
    "perplexity": perplexity,
    "bits_per_byte": bits_per_byte,
    "loss": float,
}


def encoding_spec(name: str, max_positions: int) -> str | dict[str, Any]:
    """The spec of encoding ``name`` for a model trained on ``max_positions`` tokens: the
    name, or, for an encoding whose configuration has a ``max_positions`` field (a table
    with a hard end, such as ``learned``), that field set to exactly ``max_positions`` (it
    cannot go past them; the experiments report that as cannot-run), and for one with a
    ``train_length`` field (FoPE clips the frequencies too slow to train in it), that field
    set to the training length."""
    fields = {f.name for f in dataclasses.fields(get(name).Config)}
    keys: tuple[str, ...] = ("max_positions", "train_length")
    known: dict[str, Any] = {key: max_positions for key in keys if key in fields}
    return {"name": name, **known} if known else name


def cannot_run_note(e: PositionOutOfRangeError) -> str:
    """The ``note`` of a record whose model cannot reach the evaluation's positions."""
    return f"cannot run past {e.limit_name}={e.limit} positions"


def language_model(ctx: RunContext, encoding: str, seed: int) -> TransformerLM:
    """The causal byte-level model with ``encoding``, trained with ``seed`` at the preset's
    length L on the training bytes (unit ``train--lm--<encoding>--seed<seed>``)."""
    length = ctx.preset.train_length
    model = ctx.new_model(ctx.preset.model, encoding_spec(encoding, length), seed, VOCAB_SIZE)
    return train_language_model(ctx, unit_name("train", "lm", encoding, f"seed{seed}"), model, seed)


def train_language_model(
    ctx: RunContext, name: str, model: TransformerLM, seed: int
) -> TransformerLM:
    """``model`` (causal, byte-level) trained by unit ``name`` as :func:`language_model`
    trains: the same training bytes, batches of ``seed``, length L and recipe
    (``preset.lm``), so models of other shapes (``layer-plans``) get the same budget."""
    preset = ctx.preset
    train_bytes = ctx.corpus.train

    def make_batch(generator: torch.Generator) -> TaskBatch:
        return lm_batch(train_bytes, preset.lm.batch_size, preset.train_length, generator)

    return ctx.trained(name, model, make_batch, preset.lm, seed)


def _where(ctx: RunContext) -> dict[str, int]:
    """The scored validation bytes: ``preset.eval_tokens`` of them from ``L * max factor``
    (so every sliding window up to the longest length has its full context), in steps of L."""
    preset = ctx.preset
    length = preset.train_length
    return {
        "n_tokens": preset.eval_tokens,
        "stride": length,
        "start": length * max(preset.eval_factors),
    }


def validation_windows(ctx: RunContext, length: int, mode: str) -> int:
    """How many windows :func:`validation_loss` reads at ``length`` in ``mode`` (to size a
    progress bar that it advances by one a window)."""
    return sum(1 for _ in windows(length=length, mode=mode, **_where(ctx)))


def validation_loss(
    ctx: RunContext, model: TransformerLM, length: int, mode: str, bar: Task | None = None
) -> float:
    """Mean next-token cross-entropy (nats per byte) of ``model`` on the validation bytes
    every language-model experiment scores, read in windows of ``length`` in ``mode``
    (``"chunks"`` or ``"sliding"``; see :func:`~posenc.arena.measuring.evaluate.windows`).

    Args:
        ctx: the run (its validation bytes and preset).
        model: a causal byte-level model.
        length: the evaluation length.
        mode: ``"chunks"`` or ``"sliding"``.
        bar: advanced by one a window, with the tokens read; or None.

    Raises:
        PositionOutOfRangeError: from an encoding that cannot reach ``length``.
    """
    return lm_loss(model, ctx.corpus.valid, length, mode, bar=bar, **_where(ctx))


def lm_records(
    base: dict[str, Any], loss: float, metrics: tuple[str, ...] = ("perplexity", "bits_per_byte")
) -> list[dict[str, Any]]:
    """A record per metric of ``loss`` (nats per token): ``base`` with ``metric`` and
    ``value``. A metric that is not a finite number (a NaN or infinite loss from a diverged
    model, or a perplexity past a float's range) is recorded as value None with a note,
    since a run's results hold only finite numbers.

    Args:
        base: the record's identity keys.
        loss: the mean loss.
        metrics: names among ``perplexity``, ``bits_per_byte`` and ``loss``.
    """
    records = []
    for metric in metrics:
        try:
            value = _METRICS[metric](loss)
        except OverflowError:
            value = math.inf
        if math.isfinite(value):
            records.append({**base, "metric": metric, "value": value})
        else:
            note = "non-finite loss" if not math.isfinite(loss) else f"{metric} overflows"
            records.append({**base, "metric": metric, "value": None, "note": note})
    return records
