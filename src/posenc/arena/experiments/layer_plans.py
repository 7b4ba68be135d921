"""``layer-plans``: one encoding in every layer against the per-layer plans of modern models,
trained at length L and evaluated at L, 2L, ... 16L as ``extrapolation`` is.

Seven :class:`~posenc.models.LayerPlan` models share the data, the batches, the recipe
and the seed of the language model (``preset.lm``): all RoPE, all NoPE, NoPE every 4th layer
with RoPE elsewhere (Llama 4, SmolLM3), RoPE on sliding-window layers with NoPE global
ones (3 local to 1 global, Cohere2), ALiBi for reference, and two of the research
encodings in every layer at this depth: FoX (its gates per layer, as in the paper) and
PoPE. The plans differ only from 4
layers on, so the models have the preset's width and heads and ``max(n_layers, 4)``
layers (:func:`model_size`); the local layers see ``L/4`` keys (:func:`local_window`).
Perplexity and bits per byte are measured at each length in both of Press et al.'s modes,
on the validation bytes every language-model experiment scores. The seven plans run
whatever ``--encodings`` names; their models are the units ``train--plan--<plan>--seed<k>``.

Key-value retrieval by position is measured per encoding by ``lost-in-the-middle``; this
experiment does not measure it per plan.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from ...models import LayerPlan
from ..data.batches import VOCAB_SIZE
from ..measuring.evaluate import MODES
from ..measuring.language_model import (
    lm_records,
    train_language_model,
    validation_loss,
    validation_windows,
)
from ..reporting.rows import Rows, ordering, significant
from ..running.context import RunContext, unit_name
from ..running.presets import ModelSize, Preset
from . import extrapolation
from .base import Experiment, Layout

__all__ = [
    "EXPERIMENT",
    "MIN_LAYERS",
    "NAME",
    "PLANS",
    "WINDOW_FRACTION",
    "figure",
    "local_window",
    "model_size",
    "plans",
    "run",
    "summary",
]

NAME = "layer-plans"
#: the fewest layers at which the plans differ (NoPE every 4th layer; 3 local to 1 global)
MIN_LAYERS = 4
#: the local layers' window is the training length divided by this
WINDOW_FRACTION = 4
#: the plan with local layers (its records carry their ``window``)
LOCAL = "rope-local-nope-global"
#: name -> the plan of ``n`` layers whose local layers see ``w`` keys, in report order
PLANS: dict[str, Callable[[int, int], LayerPlan]] = {
    "rope": lambda n, w: LayerPlan.uniform(n, "rope"),
    "nope": lambda n, w: LayerPlan.uniform(n, None),
    "nope-every-4": lambda n, w: LayerPlan.nope_every(n, every=4, encoding="rope"),
    LOCAL: lambda n, w: LayerPlan.local_global(n, (3, 1), window=w, local="rope", global_=None),
    "alibi": lambda n, w: LayerPlan.uniform(n, "alibi"),
    "fox": lambda n, w: LayerPlan.uniform(n, "fox"),
    "pope": lambda n, w: LayerPlan.uniform(n, "pope"),
}
RETRIEVAL = (
    "Key-value retrieval by position is measured per encoding (lost-in-the-middle), not per "
    "layer plan: a plan's retrieval model is the next step."
)


def model_size(preset: Preset) -> ModelSize:
    """The preset's language model with at least :data:`MIN_LAYERS` layers."""
    return dataclasses.replace(preset.model, n_layers=max(preset.model.n_layers, MIN_LAYERS))


def local_window(preset: Preset) -> int:
    """The keys a local layer sees: ``L / WINDOW_FRACTION`` (at least 1)."""
    return max(1, preset.train_length // WINDOW_FRACTION)


def plans(preset: Preset) -> dict[str, LayerPlan]:
    """Every plan of :data:`PLANS` at ``preset``'s size and window."""
    n, w = model_size(preset).n_layers, local_window(preset)
    return {name: make(n, w) for name, make in PLANS.items()}


def run(ctx: RunContext) -> None:
    """Train (or load) each plan's model for every seed; measure each length and mode."""
    preset = ctx.preset
    n = model_size(preset).n_layers
    raised = (
        f" (the preset's {preset.model.n_layers} raised to {n})"
        if n > preset.model.n_layers
        else ""
    )
    ctx.print(
        f"  {n} layers{raised}; local window {local_window(preset)} = "
        f"L/{WINDOW_FRACTION} of L={preset.train_length}"
    )
    for seed in preset.seeds:
        for name in PLANS:
            ctx.unit(
                unit_name(NAME, name, f"seed{seed}"),
                functools.partial(_measure, ctx, name, seed),
            )


def _measure(ctx: RunContext, name: str, seed: int) -> list[dict[str, Any]]:
    preset = ctx.preset
    size = model_size(preset)
    model = ctx.new_model(size, plans(preset)[name], seed, VOCAB_SIZE)
    model = train_language_model(ctx, unit_name("train", "plan", name, f"seed{seed}"), model, seed)
    length = preset.train_length
    cases = [(length * f, mode) for f in preset.eval_factors for mode in MODES]
    bar = ctx.progress.task(f"evaluate {name}", sum(validation_windows(ctx, *c) for c in cases))
    records: list[dict[str, Any]] = []
    for eval_length, mode in cases:
        base = {
            "experiment": NAME,
            "encoding": name,
            "seed": seed,
            "train_length": length,
            "eval_length": eval_length,
            "mode": mode,
            "n_layers": size.n_layers,
        }
        if name == LOCAL:
            base["window"] = local_window(preset)
        records += lm_records(base, validation_loss(ctx, model, eval_length, mode, bar))
    bar.close()
    return records


# --- the report ------------------------------------------------------------------------


def _judged(measured: Rows) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """The rows the summary reads (chunks mode, else sliding), their metric and mode."""
    rows, metric = measured.metric()
    modes = {r.get("mode") for r in rows}
    mode = "chunks" if "chunks" in modes else "sliding" if "sliding" in modes else None
    return [r for r in rows if r.get("mode") == mode], metric, mode


def summary(measured: Rows) -> list[str]:
    """Each plan at L and at the longest length (chunks mode), which stayed flat, the order
    at both lengths where the seeds support one (with one seed: the lowest, said to rest on
    one seed), and that retrieval by position is not measured yet."""
    rows, metric, mode = _judged(measured)
    if not rows:
        return []
    found = extrapolation.extrapolations(measured)
    train, longest = found[0].train_length, found[0].longest
    seeds = min(r["n"] for r in rows)
    layers = sorted({r["n_layers"] for r in rows if r.get("n_layers")})
    windows = sorted({r["window"] for r in rows if r.get("window")})
    where = f"{metric}, {mode} mode, " + ("one seed" if seeds <= 1 else f"{seeds} seeds")
    where += "".join(f", {n} layers" for n in layers)
    where += "".join(f", local window {w} = L/{train // w}" for w in windows)
    ran = [e for e in found if e.ratio is not None]
    out = [
        f"Layer plans ({where}): "
        + "; ".join(
            f"{e.encoding} {significant(e.at_train or 0)} at L={e.train_length}, "
            f"{significant(e.at_longest or 0)} at {e.longest} (×{e.ratio:.3g})"
            for e in ran
        )
        + "."
    ]
    flat = [e.encoding for e in ran if e.extrapolates]
    if flat:
        out.append(
            f"Flat to {longest} tokens (within {extrapolation.EXTRAPOLATES}× of L): "
            + ", ".join(flat)
            + "."
        )
    failed = [e.encoding for e in found if e.ratio is None]
    if failed:
        out.append(f"No finite {metric} for: " + ", ".join(failed) + ".")
    at = {
        f"L={n}" if n == train else str(n): [
            r for r in rows if r["eval_length"] == n and r["mean"] is not None
        ]
        for n in (train, longest)
    }
    if seeds <= 1:
        best = [(n, min(here, key=lambda r: r["mean"])) for n, here in at.items() if here]
        out.append(
            f"Lowest {metric}: "
            + "; ".join(f"at {n} {r['encoding']} ({significant(r['mean'])})" for n, r in best)
            + "; one seed, so no seed spread to judge these gaps by."
        )
    else:
        out.append(
            f"In order ({metric}; '<': a gap wider than the two plans' seed standard deviations "
            "added, '≈': not): "
            + "; ".join(f"at {n}: {ordering(here)}" for n, here in at.items() if here)
            + "."
        )
    out.append(RETRIEVAL)
    return out


def figure(measured: Rows) -> Any:
    """Perplexity against evaluation length per plan, log-log, one panel per mode:
    :func:`~.extrapolation.figure` with this experiment's title."""
    return extrapolation.figure(
        measured, title="Layer plans: trained at L, evaluated at longer lengths"
    )


EXPERIMENT = Experiment(
    name=NAME,
    title="Layer plans",
    run=run,
    layout=Layout(
        ("mode",), "eval_length", (), ("perplexity", "bits_per_byte", "loss"), multiples=True
    ),
    figure=figure,
    alt="Perplexity against evaluation length per layer plan, log-log, per mode",
    summary=summary,
)
