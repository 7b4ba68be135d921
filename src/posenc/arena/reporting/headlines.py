"""The arena report's headlines: three to five plain sentences that lead "What this run
says" (what held, what did not, how sure with this many seeds), above the per-experiment
detail of :func:`~.summary.summary`. Each is computed from the same judgements as the
detail (the experiments' own functions), so the two cannot disagree.

A run whose language models did not learn (:func:`~.reading.not_learned`) has one headline:
that it is a pipeline check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..experiments import context_extension, extrapolation, lost_in_the_middle, nope_causality
from ..experiments.extrapolation import EXTRAPOLATES
from .panels import experiment_rows
from .reading import not_learned

__all__ = ["headlines"]


def headlines(results: Mapping[str, Any]) -> list[str]:
    """The report's headlines of ``results`` (a run's ``results.json``), at most five."""
    measurements = results["measurements"]
    unlearned = not_learned(measurements)
    if unlearned:
        return [f"A pipeline check, not evidence: {unlearned}."]
    found = [
        _extrapolation(measurements),
        _nope(measurements),
        _context_extension(measurements),
        _lost_in_the_middle(measurements),
    ]
    lines = [line for line in found if line]
    if lines:
        lines.append(_seeds(measurements))
    return lines[:5]


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _extrapolation(measurements: Sequence[Mapping[str, Any]]) -> str | None:
    rows = experiment_rows(measurements, extrapolation.NAME)
    judged = [e for e in extrapolation.extrapolations(rows) if e.ratio is not None]
    if not judged:
        return None
    times = judged[0].longest / judged[0].train_length
    flat = [e.encoding for e in judged if e.extrapolates]
    grew = sorted((e for e in judged if not e.extrapolates), key=lambda e: -(e.ratio or 0))
    text = f"Read at {times:g}× the training length, "
    if flat:
        text += f"{_names(flat)} kept their perplexity within {EXTRAPOLATES:g}× of it"
    if grew:
        worst = grew[0]
        rest = f"{_names([e.encoding for e in grew])} did not ({worst.encoding} ×{worst.ratio:.2g})"
        text += f"; {rest}" if flat else rest
    return text + "."


def _nope(measurements: Sequence[Mapping[str, Any]]) -> str | None:
    found = nope_causality.verdicts(experiment_rows(measurements, nope_causality.NAME))
    causal, bidirectional = found.get("causal"), found.get("bidirectional")
    if causal is None or bidirectional is None:
        return None
    if causal[0] and bidirectional[0]:
        return (
            "NoPE learned word order from the causal mask alone and failed without it, as "
            "Haviv et al. (2022) found."
        )
    held = "learned" if causal[0] else "did not learn"
    failed = "failed" if bidirectional[0] else "did not fail"
    return (
        f"NoPE {held} word order from the causal mask alone and {failed} without it "
        "(Haviv et al. 2022 report that it learns it and fails)."
    )


def _context_extension(measurements: Sequence[Mapping[str, Any]]) -> str | None:
    rows, _ = experiment_rows(measurements, context_extension.NAME).metric()
    factors = sorted({r["factor"] for r in rows if "factor" in r})
    if not factors:
        return None
    factor, best = factors[-1], {}
    for stage in context_extension.STAGES:
        here = context_extension.stage_rows(rows, factor, stage)
        if here:
            best[stage] = min(here, key=lambda r: r["mean"])["scaling"]
    if not best:
        return None
    parts = [f"{scaling} {stage}" for stage, scaling in best.items()]
    return f"To extend RoPE ×{factor:g}, the best scaling was " + " and ".join(parts) + "."


def _lost_in_the_middle(measurements: Sequence[Mapping[str, Any]]) -> str | None:
    curves, _ = lost_in_the_middle.kv_curves(experiment_rows(measurements, lost_in_the_middle.NAME))
    learned = [c for c in curves if c.learned and c.n_pairs == c.trained_pairs]
    if not learned:
        return None
    shapes = Counter(c.shape().name for c in learned)
    found = ", ".join(f"{name} {n}" for name, n in shapes.most_common())
    return (
        f"Lost in the middle: {shapes['U']} of the {len(learned)} retrieval curves learned "
        f"were U-shaped, the shape Liu et al. (2024) report (shapes: {found})."
    )


def _seeds(measurements: Sequence[Mapping[str, Any]]) -> str:
    seeds = len({r.get("seed") for r in measurements})
    if seeds <= 1:
        return "One seed: take every ordering as a hint; no gap is judged against a spread."
    return (
        f"{seeds} seeds: an ordering is stated only where the gap exceeds the seeds' spread; "
        "closer results are called not separated."
    )
