"""``length-generalization``: train copy and reverse on short strings, test on longer ones
(Kazemnejad et al. 2023, "The impact of positional encoding on length generalization in
transformers", arXiv:2305.19466; Ruoss et al. 2023, "Randomized positional encodings boost
length generalization of transformers", arXiv:2305.16843).

For each task and encoding a small causal model learns ``BOS x SEP y EOS`` (``y`` = ``x`` or
``x`` reversed) with ``len(x)`` uniform in the preset's training range; it is then scored by
exact match (``accuracy``: every output symbol and the final ``EOS`` right) and by
``token_accuracy`` (the fraction of those targets right: a graded signal where exact match is
0) on strings of each test length and, for reference, of the longest training length.
``learned`` has a table of exactly the longest training row and is recorded as cannot-run on
the longer ones. Only the preset's ``task_encodings`` run (``RunContext.task_encodings``).

With the preset's ``samplers`` (``posenc arena run --positions randomized``), each encoding
is also trained with that position sampler (:mod:`posenc.positions.samplers`), recorded as
``<encoding>+<sampler>``: ``randomized`` draws a row's positions from ``[0, 4 M)``, ``M``
the longest test row, at training and at test (Ruoss et al.'s scheme: a row of any length
sees an ordered subset of the same range); ``pose`` trains with two skip-wise chunks
reaching ``M`` and tests at plain positions (Zhu et al.).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ...models import TransformerLM
from ...positions import PositionOutOfRangeError, PositionSampler
from ..data.tasks import (
    SEQUENCE_TASKS,
    SEQUENCE_VOCAB,
    TaskBatch,
    sequence_batch,
    sequence_length,
)
from ..measuring.evaluate import task_accuracies
from ..measuring.language_model import cannot_run_note, encoding_spec
from ..reporting import plotting
from ..reporting.rows import Rows, leader, ordering
from ..running.context import RunContext, unit_name
from .base import Experiment, Layout

__all__ = [
    "EXPERIMENT",
    "NAME",
    "eval_lengths",
    "figure",
    "run",
    "sampler",
    "summary",
    "task_model",
]

NAME = "length-generalization"


def run(ctx: RunContext) -> None:
    """Train (or load) a model per task, encoding and seed; measure accuracy at each length."""
    for task in SEQUENCE_TASKS:
        for seed in ctx.preset.seeds:
            for encoding in ctx.task_encodings():
                samplers = () if encoding == "nope" else ctx.preset.samplers  # no positions
                for label in [encoding, *(f"{encoding}+{s}" for s in samplers)]:
                    ctx.unit(
                        unit_name(NAME, task, label, f"seed{seed}"),
                        functools.partial(_measure, ctx, task, label, seed),
                    )


def sampler(ctx: RunContext, label: str) -> tuple[str, PositionSampler | None]:
    """The encoding and the position sampler of a row's ``label`` (``"rope+pose"``)."""
    encoding, _, kind = label.partition("+")
    if not kind:
        return encoding, None
    longest = sequence_length(ctx.preset.task_test_lengths[1])
    reach = 4 * longest if kind == "randomized" else longest
    return encoding, PositionSampler(kind, reach)


def eval_lengths(ctx: RunContext) -> list[int]:
    """The task lengths measured: the longest training length, then every test length."""
    low, high = ctx.preset.task_test_lengths
    return [ctx.preset.task_train_lengths[1], *range(low, high + 1)]


def task_model(ctx: RunContext, task: str, label: str, seed: int) -> TransformerLM:
    """The causal model of ``label`` (an encoding, or ``<encoding>+<sampler>``) trained with
    ``seed`` on ``task`` (``"copy"`` or ``"reverse"``) at the preset's training lengths
    (unit ``train--<task>--<label>--seed<k>``). A ``learned`` table holds exactly the
    longest training row, or with a sampler every position it draws."""
    preset = ctx.preset
    low, high = preset.task_train_lengths
    encoding, positions = sampler(ctx, label)
    table = sequence_length(high) if positions is None else positions.max_position
    spec = encoding_spec(encoding, table)
    model = ctx.new_model(preset.task_model, spec, seed, SEQUENCE_VOCAB)
    config = preset.sequence_task

    def make_batch(generator: torch.Generator) -> TaskBatch:
        batch = sequence_batch(task, config.batch_size, low, high, generator)
        if positions is None:
            return batch
        rows, length = batch.inputs.shape
        drawn = positions(rows, length, generator)  # drawn after the rows: one stream
        return TaskBatch(batch.inputs, batch.targets, drawn)

    return ctx.trained(
        unit_name("train", task, label, f"seed{seed}"), model, make_batch, config, seed
    )


def _measure(ctx: RunContext, task: str, encoding: str, seed: int) -> list[dict[str, Any]]:
    preset = ctx.preset
    model = task_model(ctx, task, encoding, seed)
    lengths = eval_lengths(ctx)
    _, positions = sampler(ctx, encoding)
    records: list[dict[str, Any]] = []
    bar = ctx.progress.task(f"evaluate {task} {encoding}", len(lengths))
    for n in lengths:
        base = {
            "experiment": NAME,
            "encoding": encoding,
            "seed": seed,
            "train_length": preset.task_train_lengths[1],
            "eval_length": n,
            "task": task,
        }
        # the same strings for every encoding; disjoint from training's step generators
        generator = torch.Generator().manual_seed(10_000 + seed * 1000 + n)
        batch = sequence_batch(task, preset.task_eval_rows, n, n, generator)
        if positions is not None and positions.kind == "randomized":  # sampled at test too
            drawn = positions(batch.inputs.shape[0], batch.inputs.shape[1], generator)
            batch = TaskBatch(batch.inputs, batch.targets, drawn)
        metrics = ("accuracy", "token_accuracy")
        try:
            exact, token = task_accuracies(model, batch)
            records.append({**base, "metric": "accuracy", "value": exact})
            records.append({**base, "metric": "token_accuracy", "value": token})
        except PositionOutOfRangeError as e:
            note = cannot_run_note(e)
            records += [{**base, "metric": m, "value": None, "note": note} for m in metrics]
        bar.advance(1, tokens=batch.inputs.numel())
    bar.close()
    return records


# --- the report ------------------------------------------------------------------------


def figure(measured: Rows) -> Any:
    """Exact-match accuracy (solid) and per-token accuracy (dotted) against test length per
    encoding, one panel per task, the training lengths shaded."""
    rows, _ = measured.metric()
    per_token, _ = measured.metric("token_accuracy")
    tasks = plotting.values(rows, "task")
    fig, axes = plotting.new_figure(
        len(tasks), "Length generalisation: synthetic tasks past the training lengths"
    )
    colors = plotting.colors(rows, "encoding")
    for ax, task in zip(axes, tasks, strict=False):
        here = [r for r in rows if r.get("task") == task]
        train = max(r["train_length"] for r in here)
        ax.axvspan(0, train, color="grey", alpha=0.15, linewidth=0, label=f"trained (≤ {train})")
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            mine = [r for r in here if r["encoding"] == encoding]
            plotting.line(ax, mine, "eval_length", color=colors[encoding], label=encoding)
            tokens = [r for r in per_token if r.get("task") == task and r["encoding"] == encoding]
            plotting.line(ax, tokens, "eval_length", color=colors[encoding], linestyle=":")
        if per_token:
            ax.plot([], [], color="grey", linestyle=":", label="per token (dotted)")
        ax.set_xlim(0, max(r["eval_length"] for r in here) * 1.05)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"task: {task}" if task is not None else "")
        ax.set_xlabel("test length (tokens)")
        ax.set_ylabel("exact-match accuracy" + (" (dotted: per token)" if per_token else ""))
        ax.legend(fontsize="small")
    if not rows:
        plotting.empty(axes[0])
    return fig


def _two(value: float) -> str:
    return f"{value:.2f}"


def summary(measured: Rows) -> list[str]:
    """Per task, the best encoding at the longest training length and at the longest test
    length (exact match), and the best per token there."""
    rows, metric = measured.metric()
    out = []
    for task in sorted({r.get("task") for r in rows}, key=str):
        here = [r for r in rows if r.get("task") == task]
        longest = max(r["eval_length"] for r in here)
        ran = [r for r in here if r["eval_length"] == longest and r["mean"] is not None]
        if not ran:
            continue
        best = max(ran, key=lambda r: r["mean"])
        train = max(r["train_length"] for r in here)
        learned = [r for r in here if r["eval_length"] == train and r["mean"] is not None]
        text = f"Length generalisation ({task}, trained up to {train}): "
        if learned:
            text += f"at {train} the best is {leader(learned, lower=False, fmt=_two)} ({metric}); "
        if best["mean"] > 0:
            text += f"at {longest} the best is {leader(ran, lower=False, fmt=_two)}"
        else:
            text += f"no encoding gets a whole string right at {longest}"
        tokens = [
            r
            for r in measured.metric("token_accuracy")[0]
            if r.get("task") == task and r["eval_length"] == longest and r["mean"] is not None
        ]
        if tokens:
            text += f"; per token there: {ordering(tokens, lower=False, fmt=_two)}"
        out.append(text + ".")
    return out


EXPERIMENT = Experiment(
    name=NAME,
    title="Length generalisation",
    run=run,
    layout=Layout(("task",), "eval_length", (), ("accuracy",), also=("token_accuracy",)),
    figure=figure,
    alt="Exact-match accuracy against test length per encoding and task",
    summary=summary,
)
