"""``nope-needs-causality``: a model without positional encoding (NoPE) learns language as
well as one with positions when it is causal, and fails when it is not (Haviv et al. 2022,
"Transformer language models without positional encodings still learn positional
information", arXiv:2203.16634).

A causal mask tells a token how many tokens precede it, so a causal NoPE model can recover
positions; a bidirectional encoder without positions is permutation-equivariant and cannot
tell its tokens' order. For NoPE, sinusoidal and RoPE this measures (a) the perplexity of the
causal language model at L (non-overlapping chunks, the bytes ``extrapolation`` scores) and
(b) the perplexity over the masked tokens of a bidirectional masked language model (Devlin et
al. 2019) trained with the same budget at L.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from ...models import TransformerLM
from ..batches import MASKED_VOCAB, masked_batch
from ..progress import Task
from ..runner import RunContext, unit_name
from ..tasks import IGNORE, TaskBatch
from .language_model import language_model, lm_records, validation_loss, validation_windows

__all__ = ["ENCODINGS", "NAME", "masked_eval_batches", "masked_loss", "masked_model", "run"]

NAME = "nope-needs-causality"

#: NoPE against an absolute and a relative encoding
ENCODINGS = ("nope", "sinusoidal", "rope")
_ROWS = 16  # rows per evaluation batch
_METRICS = ("perplexity", "loss")  # of each loss (nats per token)


def run(ctx: RunContext) -> None:
    """For every seed and encoding: the causal model's perplexity and the masked model's."""
    for seed in ctx.preset.seeds:
        for encoding in ENCODINGS:
            ctx.unit(
                unit_name(NAME, encoding, f"seed{seed}"),
                functools.partial(_measure, ctx, encoding, seed),
            )


def masked_model(ctx: RunContext, encoding: str, seed: int) -> TransformerLM:
    """The bidirectional masked language model with ``encoding``, trained with ``seed`` at L
    on the training bytes (unit ``train--mlm--<encoding>--seed<seed>``; loaded once it ended).

    Args:
        ctx: the run.
        encoding: a registered encoding name.
        seed: the seed of its initialisation and batches.

    Returns:
        the model, in eval mode, with :data:`~posenc.arena.batches.MASKED_VOCAB` tokens.
    """
    preset = ctx.preset
    length = preset.train_length
    model = ctx.new_model(preset.model, encoding, seed, MASKED_VOCAB, causal=False)
    train_bytes = ctx.corpus.train

    def make_batch(generator: torch.Generator) -> TaskBatch:
        return masked_batch(train_bytes, preset.mlm.batch_size, length, generator)

    name = unit_name("train", "mlm", encoding, f"seed{seed}")
    return ctx.trained(name, model, make_batch, preset.mlm, seed)


def masked_eval_batches(ctx: RunContext, seed: int) -> list[TaskBatch]:
    """Masked windows of L validation bytes, drawn from a generator fixed by ``seed`` (the same
    for every encoding, apart from training's), until they hold ``preset.eval_tokens`` masked
    tokens (the last batch may pass it).

    Args:
        ctx: the run (its validation bytes and preset).
        seed: the seed whose evaluation draws these are.

    Returns:
        batches of 16 rows, inputs and targets ``[16, L]`` as
        :func:`~posenc.arena.batches.masked_batch` makes them.
    """
    preset = ctx.preset
    generator = torch.Generator().manual_seed(10_000 + seed * 1000 + 1)
    batches: list[TaskBatch] = []
    masked = 0
    while masked < preset.eval_tokens:
        batch = masked_batch(ctx.corpus.valid, _ROWS, preset.train_length, generator)
        batches.append(batch)
        masked += int((batch.targets != IGNORE).sum())
    return batches


@torch.no_grad()
def masked_loss(model: TransformerLM, batches: list[TaskBatch], bar: Task | None = None) -> float:
    """Mean cross-entropy (nats) of ``model`` over the masked tokens of ``batches``
    (``bar`` advances by one a batch).

    Args:
        model: a bidirectional masked language model.
        batches: from :func:`masked_eval_batches`.
        bar: a progress bar, or None.

    Returns:
        nats per masked token.
    """
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for batch in batches:
        logits = model(batch.inputs.to(device))  # [rows, L, vocab]
        targets = batch.targets.to(device)
        total += F.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum"
        ).item()
        count += int((targets != IGNORE).sum())
        if bar is not None:
            bar.advance(1, tokens=batch.inputs.numel())
    return total / count


def _measure(ctx: RunContext, encoding: str, seed: int) -> list[dict[str, Any]]:
    length = ctx.preset.train_length
    base = {
        "experiment": NAME,
        "encoding": encoding,
        "seed": seed,
        "train_length": length,
        "eval_length": length,
    }
    causal = language_model(ctx, encoding, seed)
    bidirectional = masked_model(ctx, encoding, seed)
    batches = masked_eval_batches(ctx, seed)
    total = validation_windows(ctx, length, "chunks") + len(batches)
    bar = ctx.progress.task(f"evaluate {encoding}", total)
    # (a) the bytes, windows and code of extrapolation's number at L
    loss = validation_loss(ctx, causal, length, "chunks", bar)
    records = lm_records({**base, "mode": "causal"}, loss, _METRICS)
    loss = masked_loss(bidirectional, batches, bar)
    bar.close()
    return records + lm_records({**base, "mode": "bidirectional"}, loss, _METRICS)
