"""``lost-in-the-middle``: key-value retrieval accuracy by where the answer sits (Liu et al.
2023, "Lost in the middle: how language models use long contexts", arXiv:2307.03172, §4).

A small causal model learns to answer ``BOS k1 v1 ... kn vn QUERY kq`` with the value of
``kq``, half its batches with the query also at the start (``BOS QUERY kq ...``, Liu et al.'s
query-aware contextualisation). It is scored by exact match for every gold position
``g in range(n)``, for each number of pairs ``n`` of the preset (the first is the training
number, the others longer contexts) and both query placements. ``learned`` has a table of
exactly the longest training row and is recorded as cannot-run past it. With ``--hf-model``
the same probe runs as text prompts on a local Hugging Face model (:mod:`.hf_probe`).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
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

__all__ = [
    "EXPERIMENT",
    "MODES",
    "NAME",
    "Curve",
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
# The middle is "lost" when its accuracy is this far below both ends.
_U_MARGIN = 0.05


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
    """Queries per training row of ``n_pairs`` pairs (multi-query recall: more supervision per
    row; a training row stays shorter than an evaluation row of twice the pairs)."""
    return max(1, n_pairs // 2)


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
    model = ctx.new_model(preset.task_model, spec, seed, KV_VOCAB)
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


@dataclass(frozen=True)
class Curve:
    """One encoding's key-value retrieval in a run, per query placement (``mode``) at the
    trained (smallest) number of pairs: mean accuracy over seeds by gold position."""

    mode: str | None
    n_pairs: int
    encoding: str
    accuracy: dict[int, float]

    @property
    def mean(self) -> float:
        """The accuracy averaged over gold positions."""
        return statistics.fmean(self.accuracy.values())

    @property
    def learned(self) -> bool:
        """Mean accuracy ≥ 1.5× a random value of the context's (1/n_pairs): a curve to read."""
        return self.mean >= 1.5 / self.n_pairs

    def ends(self) -> tuple[float, float, float]:
        """The accuracy at the first, middle and last gold position."""
        first, *_, last = positions = sorted(self.accuracy)
        middle = min(positions, key=lambda p: (abs(p - (first + last) / 2), p))
        return self.accuracy[first], self.accuracy[middle], self.accuracy[last]


def kv_curves(measured: Rows) -> tuple[list[Curve], str | None]:
    """A run's lost-in-the-middle curves (encodings with at least three gold positions that
    ran, query-last placement first) and their metric; ``([], None)`` without the experiment."""
    rows, metric = measured.metric()
    out = []
    for mode in sorted({r.get("mode") for r in rows}, key=str, reverse=True):
        here = [r for r in rows if r.get("mode") == mode]
        n_pairs = min((r.get("n_pairs") or 0) for r in here)  # the trained number
        here = [r for r in here if (r.get("n_pairs") or 0) == n_pairs]
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            at = {
                r["gold_position"]: r["mean"]
                for r in here
                if r["encoding"] == encoding and r["mean"] is not None
            }
            if len(at) >= 3:
                out.append(Curve(mode, n_pairs, encoding, at))
    return out, metric


def summary(measured: Rows) -> list[str]:
    """Per query placement, at the trained number of pairs: the accuracy at the first, middle
    and last gold position per encoding (U-shaped or not), or that retrieval was not learned
    (mean accuracy under 1.5x that of answering a random value of the context)."""
    curves, metric = kv_curves(measured)
    out = []
    for mode, n_pairs in dict.fromkeys((c.mode, c.n_pairs) for c in curves):
        parts, unlearned = [], []
        for c in curves:
            if (c.mode, c.n_pairs) != (mode, n_pairs):
                continue
            if not c.learned:
                unlearned.append(f"{c.encoding} {c.mean:.2f}")
                continue
            a, m, z = c.ends()
            shape = "U-shaped" if m < min(a, z) - _U_MARGIN else "no U"
            parts.append(f"{c.encoding} first {a:.2f}, middle {m:.2f}, last {z:.2f} ({shape})")
        if unlearned:
            parts.append(
                f"not learned at this budget, so no curve to read ({metric} {', '.join(unlearned)}"
                f"; answering a random value of the context scores {1 / n_pairs:.2f})"
            )
        if parts:
            out.append(
                f"Lost in the middle ({mode}, {n_pairs} pairs, {metric}): " + "; ".join(parts) + "."
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
