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
import statistics
from typing import Any

import torch
import torch.nn.functional as F

from ...models import TransformerLM
from ..data.batches import MASKED_VOCAB, masked_batch
from ..data.tasks import IGNORE, TaskBatch
from ..measuring.language_model import (
    language_model,
    lm_records,
    validation_loss,
    validation_windows,
)
from ..reporting import plotting
from ..reporting.rows import Rows, significant
from ..running.context import RunContext, unit_name
from ..running.progress import Task
from .base import Experiment, Layout
from .extrapolation import EXTRAPOLATES

__all__ = [
    "ENCODINGS",
    "EXPERIMENT",
    "NAME",
    "figure",
    "masked_eval_batches",
    "masked_loss",
    "masked_model",
    "run",
    "summary",
]

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
        the model, in eval mode, with :data:`~posenc.arena.data.batches.MASKED_VOCAB` tokens.
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
        :func:`~posenc.arena.data.batches.masked_batch` makes them.
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


# --- the report ------------------------------------------------------------------------


def figure(measured: Rows) -> Any:
    """Grouped bars: the metric per encoding, causal beside bidirectional (log y when the
    bars span more than a factor 20)."""
    rows, metric = measured.metric()
    fig, axes = plotting.new_figure(1, "NoPE needs causality: causal vs bidirectional attention")
    ax = axes[0]
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    modes = plotting.values(rows, "mode")
    width = 0.8 / max(len(modes), 1)
    colors = {"causal": "#1f77b4", "bidirectional": "#d62728"}
    for j, mode in enumerate(modes):
        means = []
        for encoding in encodings:
            hit = [r for r in rows if r["encoding"] == encoding and r.get("mode") == mode]
            means.append(hit[0]["mean"] if hit and hit[0]["mean"] is not None else 0.0)
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(encodings))]
        bars = ax.bar(xs, means, width, label=str(mode), color=colors.get(str(mode)))
        for bar, mean in zip(bars, means, strict=True):
            if mean == 0.0:
                ax.annotate("n/a", (bar.get_x() + width / 2, 0), ha="center", va="bottom")
    means = [r["mean"] for r in rows if r["mean"]]
    if means and max(means) / min(means) > 20:
        plotting.log_y(ax)
    ax.set_xticks(range(len(encodings)), encodings)
    ax.set_xlabel("encoding")
    ax.set_ylabel(plotting.unit(metric))
    if rows:
        ax.legend(title="attention", fontsize="small")
    else:
        plotting.empty(ax)
    return fig


def verdicts(measured: Rows) -> dict[str, tuple[bool, float, float, int]]:
    """Per mode (``causal``, ``bidirectional``) that ran: whether NoPE did as the papers say
    (worked causally: within :data:`EXTRAPOLATES` of the median of the other encodings;
    failed bidirectionally: beyond it), its metric, that median and how many encodings."""
    rows, _ = measured.metric()
    nope = {r.get("mode"): r["mean"] for r in rows if r["encoding"] == "nope"}
    others: dict[Any, list[float]] = {}
    for r in rows:
        if r["encoding"] != "nope" and r["mean"] is not None:
            others.setdefault(r.get("mode"), []).append(r["mean"])
    out = {}
    for mode in ("causal", "bidirectional"):
        mine, theirs = nope.get(mode), others.get(mode)
        if mine is None or not theirs:
            continue
        ref = statistics.median(theirs)
        held = (mine / ref <= EXTRAPOLATES) == (mode == "causal")
        out[mode] = (held, mine, ref, len(theirs))
    return out


def summary(measured: Rows) -> list[str]:
    """Whether NoPE works causally and fails bidirectionally: its metric against the median
    of the other encodings, judged by the extrapolation factor :data:`EXTRAPOLATES`."""
    _, metric = measured.metric()
    words = {
        ("causal", True): "works causally",
        ("causal", False): "does not work causally",
        ("bidirectional", True): "fails bidirectionally",
        ("bidirectional", False): "does not fail bidirectionally",
    }
    return [
        f"NoPE {words[mode, held]}: {mode} {metric} {significant(mine)} vs {significant(ref)} "
        f"for the other encodings (median of {n}; ×{mine / ref:.3g})."
        for mode, (held, mine, ref, n) in verdicts(measured).items()
    ]


EXPERIMENT = Experiment(
    name=NAME,
    title="NoPE needs causality",
    run=run,
    layout=Layout((), "mode", (), ("perplexity", "loss", "bits_per_byte")),
    figure=figure,
    alt="Bars of perplexity per encoding, causal beside bidirectional",
    summary=summary,
)
