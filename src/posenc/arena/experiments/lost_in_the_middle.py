"""``lost-in-the-middle``: key-value retrieval accuracy by where the answer sits (Liu et al.
2023, "Lost in the middle: how language models use long contexts", arXiv:2307.03172, §4).

A small causal model learns to answer ``BOS k1 v1 ... kn vn QUERY kq`` with the value of
``kq``, half its batches with the query also at the start (``BOS QUERY kq ...``, Liu et al.'s
query-aware contextualisation). It is scored by exact match for every gold position
``g in range(n)``, for each number of pairs ``n`` of the preset (the first is the training
number, the others longer contexts) and both query placements. ``learned`` has a table of
exactly the longest training row and is recorded as cannot-run past it. With ``--hf-model``
the same probe runs as text prompts on a local Hugging Face model
(:mod:`~posenc.arena.measuring.hf_probe`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ...models import TransformerLM
from ...positions import PositionOutOfRangeError
from ..data.tasks import KV_MODES, KV_VOCAB, TaskBatch, kv_batch, kv_length, kv_probes
from ..measuring.evaluate import task_accuracy
from ..measuring.hf_probe import run_probe
from ..measuring.language_model import cannot_run_note, encoding_spec
from ..reporting import plotting
from ..reporting.rows import Rows
from ..running.context import RunContext, unit_name
from .base import Experiment, Layout
from .kv_curves import MIN_GAP, Curve, Shape, kv_curves

__all__ = [
    "EXPERIMENT",
    "MIN_GAP",
    "MODES",
    "NAME",
    "Curve",
    "Shape",
    "figure",
    "kv_curves",
    "kv_model",
    "kv_train_length",
    "run",
    "summary",
    "train_queries",
]

NAME = "lost-in-the-middle"

#: query placements: the key line after the pairs only, or before them too
MODES = KV_MODES


def run(ctx: RunContext) -> None:
    """Train (or load) a model per encoding and seed; measure accuracy at each gold position;
    then probe ``ctx.hf_model`` when one is given."""
    for seed in ctx.preset.seeds:
        for encoding in ctx.task_encodings():
            ctx.unit(
                unit_name(NAME, encoding, f"seed{seed}"),
                functools.partial(_measure, ctx, encoding, seed),
            )
    if ctx.hf_model is not None:
        run_probe(ctx, NAME)


def train_queries(n_pairs: int) -> int:
    """Queries per training row of ``n_pairs`` pairs: every pair once (multi-query recall, the
    most supervision a row holds). Measured at 8 pairs: with half of them asked, no phase
    change in 2,000 steps; with all of them, one near step 1,000 (docs/arena.md). A
    training row (``5 n + 2`` tokens) is then longer than an evaluation row of ``2 n``
    pairs (``4 n + 3``): twice the pairs is a longer context in pairs, not in positions; four
    times (``8 n + 3``) is both."""
    return n_pairs


def kv_train_length(n_pairs: int) -> int:
    """The longest training row with ``n_pairs`` pairs (query-first, :func:`train_queries`
    queries): the ``train_length`` of the records and the length of ``learned``'s table."""
    return kv_length(n_pairs, query_first=True, n_queries=train_queries(n_pairs))


def kv_model(ctx: RunContext, encoding: str, seed: int) -> TransformerLM:
    """The causal model with ``encoding`` trained with ``seed`` on key-value retrieval with
    the preset's number of pairs (unit ``train--kv--<encoding>--seed<seed>``)."""
    preset = ctx.preset
    n, m = preset.kv_pairs, train_queries(preset.kv_pairs)
    spec = encoding_spec(encoding, kv_train_length(n))
    model = ctx.new_model(preset.kv_model, spec, seed, KV_VOCAB)
    config = preset.kv

    def make_batch(generator: torch.Generator) -> TaskBatch:
        query_first = bool(torch.randint(0, 2, (), generator=generator))
        return kv_batch(config.batch_size, n, generator, query_first=query_first, n_queries=m)

    return ctx.trained(
        unit_name("train", "kv", encoding, f"seed{seed}"), model, make_batch, config, seed
    )


def _measure(ctx: RunContext, encoding: str, seed: int) -> list[dict[str, Any]]:
    preset = ctx.preset
    model = kv_model(ctx, encoding, seed)
    train_length = kv_train_length(preset.kv_pairs)
    records: list[dict[str, Any]] = []
    bar = ctx.progress.task(f"evaluate kv {encoding}", len(MODES) * sum(preset.kv_test_pairs))
    for probe in kv_probes(preset.kv_test_pairs, seed):
        base = probe.record(
            experiment=NAME, encoding=encoding, seed=seed, train_length=train_length
        )
        batch = kv_batch(
            preset.kv_eval_rows,
            probe.n_pairs,
            probe.generator,
            gold=probe.gold,
            query_first=probe.query_first,
        )
        try:
            records.append({**base, "value": task_accuracy(model, batch)})
        except PositionOutOfRangeError as e:
            records.append({**base, "value": None, "note": cannot_run_note(e)})
        bar.advance(1, tokens=batch.inputs.numel())
    bar.close()
    return records


# --- the report ------------------------------------------------------------------------


def figure(measured: Rows) -> Any:
    """Key-value retrieval accuracy against the gold pair's position per encoding, panels
    query-last and query-first; solid lines for the fewest pairs, dashed for more."""
    rows, metric = measured.metric()
    modes = plotting.values(rows, "mode")
    fig, axes = plotting.new_figure(
        len(modes), "Lost in the middle: retrieval by position of the gold pair"
    )
    colors = plotting.colors(rows, "encoding")
    styles = ["-", "--", ":", "-."]
    pair_counts = plotting.values(rows, "n_pairs")
    for ax, mode in zip(axes, modes, strict=False):
        here = [r for r in rows if r.get("mode") == mode]
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            for k, n_pairs in enumerate(pair_counts):
                mine = [
                    r for r in here if r["encoding"] == encoding and r.get("n_pairs") == n_pairs
                ]
                if mine:
                    label = f"{encoding}, {n_pairs} pairs" if n_pairs is not None else encoding
                    plotting.line(ax, mine, "gold_position", color=colors[encoding],
                          linestyle=styles[k % len(styles)], label=label)  # fmt: skip
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"{mode}" if mode is not None else "")
        ax.set_xlabel("position of the gold pair (0 = first)")
        ax.set_ylabel(plotting.unit(metric))
        ax.legend(fontsize="small")
    if not rows:
        plotting.empty(axes[0])
    return fig


_SHAPES = {
    "U": "U (both ends above the middle)",
    "recency": "recency (last above first)",
    "primacy": "primacy (first above last)",
    "flat": "flat",
}


def summary(measured: Rows) -> list[str]:
    """How well each encoding learned retrieval at the trained number of pairs (mean and seed
    range), then per query placement and longer context, each curve's shape as
    :meth:`Curve.shape` judges it, or that retrieval was not learned (mean accuracy under
    1.5x that of answering a random value of the context)."""
    curves, metric = kv_curves(measured)
    if not curves:
        return []
    seeds = max(len(c.by_seed) for c in curves)
    where = f"{metric}, " + ("one seed, so no seed spread" if seeds <= 1 else f"{seeds} seeds")
    trained = [c for c in curves if c.n_pairs == c.trained_pairs]
    out = [
        f"Retrieval in distribution ({where}; {trained[0].n_pairs} pairs, mean ± seed range): "
        + "; ".join(f"{c.encoding} {c.mode} {c.mean:.2f} ± {c.spread:.2f}" for c in trained)
        + "."
    ]
    for mode, n_pairs in dict.fromkeys((c.mode, c.n_pairs) for c in curves):
        here = [c for c in curves if (c.mode, c.n_pairs) == (mode, n_pairs)]
        parts, unlearned = [], []
        for c in here:
            if not c.learned:
                unlearned.append(f"{c.encoding} {c.mean:.2f}")
                continue
            s = c.shape()
            parts.append(
                f"{c.encoding} {_SHAPES[s.name]}: first {s.first:.2f}, middle {s.middle:.2f}, "
                f"last {s.last:.2f}"
            )
        if unlearned:
            trained_pairs = here[0].trained_pairs
            parts.append(
                f"not learned, so no curve to read: {', '.join(unlearned)} (at "
                f"{trained_pairs} pairs a random value of the context scores "
                f"{1 / trained_pairs:.2f})"
            )
        margin = f"gaps read where above max({MIN_GAP}, seed range)"
        out.append(
            f"Lost in the middle ({mode}, {n_pairs} pairs, {margin}): " + "; ".join(parts) + "."
        )
    return out


EXPERIMENT = Experiment(
    name=NAME,
    title="Lost in the middle",
    run=run,
    layout=Layout(
        ("mode", "n_pairs"), "gold_position", ("eval_length", "train_length"), ("accuracy",)
    ),
    figure=figure,
    alt="Retrieval accuracy against the gold pair's position per encoding",
    summary=summary,
)
