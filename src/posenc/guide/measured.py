"""What an arena run measured that bears on a situation of the guide: one line per
experiment, read through the arena's one public reader (:func:`posenc.arena.read_measurements`
and its :class:`~posenc.arena.Measurements`: an experiment's rows, the extrapolations and
the lost-in-the-middle curves), so the guide and the run's report judge the numbers the
same way.

Perplexities and ratios are written with three significant digits, accuracies with two
decimals.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..arena.reporting.reading import LANGUAGE_MODELS
from .situations import Situation

if TYPE_CHECKING:
    from ..arena import Measurements

__all__ = ["LANGUAGE_MODELS", "evidence", "not_learned"]


def _g(value: float) -> str:
    """Three significant digits; thousands whole, with commas, up to a million."""
    return f"{value:,.0f}" if 1e3 <= abs(value) < 1e6 else f"{value:.3g}"


def _extrapolation(run: Measurements, names: Sequence[str]) -> list[str]:
    """Each named encoding at L and at the longest length, then the best at L and the
    flattest of the run."""
    found = run.extrapolations()
    if not found:
        return []
    first = found[0]
    parts = []
    for e in found:
        if e.encoding not in names:
            continue
        if e.ratio is None or e.at_train is None or e.at_longest is None:
            past = f"past {e.ran_up_to}" if e.ran_up_to is not None else "at all"
            parts.append(f"{e.encoding} cannot run {past}")
            continue
        verdict = "flat" if e.extrapolates else "does not extrapolate"
        parts.append(
            f"{e.encoding} {_g(e.at_train)} → {_g(e.at_longest)} (×{_g(e.ratio)}, {verdict})"
        )
    missing = [n for n in names if n not in {e.encoding for e in found}]
    if missing:
        parts.append(f"not in this run: {', '.join(missing)}")
    at_l = [(e.at_train, e.encoding) for e in found if e.at_train is not None]
    flat = [(e.ratio, e.encoding) for e in found if e.ratio is not None]
    tail = []
    if at_l:
        value, name = min(at_l)
        tail.append(f"Best at L: {name} ({_g(value)})")
    if flat:
        value, name = min(flat)
        tail.append(f"flattest: {name} (×{_g(value)})")
    train = min(e.train_length for e in found)
    head = f"extrapolation ({first.metric}, {first.mode} mode, L={train} → {first.longest}): "
    text = head + "; ".join(parts)
    if tail:
        text += (". " if parts else "") + "; ".join(tail)
    return [text + "."]


def _context_extension(run: Measurements, names: Sequence[str]) -> list[str]:
    """The best RoPE scaling at the largest factor, zero-shot and after the fine-tune."""
    rows, metric = run.rows("context-extension")
    rows = [r for r in rows if r["mean"] is not None and r.get("factor") is not None]
    if not rows:
        return []
    factor = max(r["factor"] for r in rows)
    parts = []
    for stage, what in (("zero-shot", "zero-shot"), ("fine-tuned", "after a short fine-tune")):
        here = [r for r in rows if r["factor"] == factor and r.get("stage") == stage]
        if not here:
            continue
        best = min(here, key=lambda r: r["mean"])
        none = next((r for r in here if r.get("scaling") == "none"), None)
        text = f"{what} the best is {best.get('scaling')} ({_g(best['mean'])}"
        text += f"; none {_g(none['mean'])})" if none is not None and none is not best else ")"
        parts.append(text)
    length = max(r["eval_length"] for r in rows if r["factor"] == factor)
    return [
        f"context extension of RoPE to ×{factor} ({length} tokens, {metric}): "
        + "; ".join(parts)
        + "."
    ]


def _length_generalization(run: Measurements, names: Sequence[str]) -> list[str]:
    """Per task, at the longest length: the named encodings' accuracy and the best; a task
    no encoding learned at its trained lengths is said to be so, with no numbers."""
    rows, metric = run.rows("length-generalization")
    rows = [r for r in rows if r["mean"] is not None]
    parts = []
    for task in sorted({r.get("task") for r in rows}, key=str):
        here = [r for r in rows if r.get("task") == task]
        longest = max(r["eval_length"] for r in here)
        train = max(r["train_length"] for r in here)
        inside = [r["mean"] for r in here if r["eval_length"] <= train]
        if inside and max(inside) <= 0:  # nothing learned to generalise from
            parts.append(
                f"{task}: not learned (no encoding gets a whole string right at the trained "
                f"lengths), so not evidence"
            )
            continue
        there = [r for r in here if r["eval_length"] == longest]
        mine = [f"{r['encoding']} {r['mean']:.2f}" for r in there if r["encoding"] in names]
        best = max(there, key=lambda r: r["mean"])
        if best["mean"] > 0 and best["encoding"] not in names:
            mine.append(f"best {best['encoding']} {best['mean']:.2f}")
        elif best["mean"] <= 0:
            mine.append("no encoding gets a whole string right")
        parts.append(f"{task} trained up to {train}, at {longest}: " + ", ".join(mine))
    if not parts:
        return []
    return [f"length generalisation ({metric}): " + "; ".join(parts) + "."]


def _nope(run: Measurements, names: Sequence[str]) -> list[str]:
    """NoPE against the median of the other encodings, with and without a causal mask."""
    rows, metric = run.rows("nope-needs-causality")
    rows = [r for r in rows if r["mean"] is not None]
    parts = []
    for mode in ("causal", "bidirectional"):
        nope = [r["mean"] for r in rows if r.get("mode") == mode and r["encoding"] == "nope"]
        others = [r["mean"] for r in rows if r.get("mode") == mode and r["encoding"] != "nope"]
        if nope and others:
            ref = statistics.median(others)
            parts.append(f"{mode} {_g(nope[0])} vs {_g(ref)} (×{_g(nope[0] / ref)})")
    if not parts:
        return []
    return [f"NoPE vs the median of the other encodings ({metric}): " + "; ".join(parts) + "."]


def _lost_in_the_middle(run: Measurements, names: Sequence[str]) -> list[str]:
    """The named encodings' retrieval curves where it was learned (the curve's ``learned``,
    as the report judges it): at the trained number of pairs their mean, at more pairs their
    shape (U, recency, primacy or flat) with the first, middle and last accuracy."""
    curves, metric = run.kv_curves()
    parts = []
    for c in curves:
        if c.encoding not in names or not c.learned:
            continue
        where = f"{c.encoding} {c.mode} {c.n_pairs} pairs"
        if c.n_pairs == c.trained_pairs:
            parts.append(f"{where} (trained): {c.mean:.2f}")
            continue
        s = c.shape()
        parts.append(
            f"{where}: {s.name}, first {s.first:.2f}, middle {s.middle:.2f}, last {s.last:.2f}"
        )
    if not parts:
        return []
    return [f"lost in the middle ({metric} by gold position): " + "; ".join(parts) + "."]


_READERS: dict[str, Callable[[Measurements, Sequence[str]], list[str]]] = {
    "extrapolation": _extrapolation,
    "context-extension": _context_extension,
    "length-generalization": _length_generalization,
    "nope-needs-causality": _nope,
    "lost-in-the-middle": _lost_in_the_middle,
}


def not_learned(run: Measurements) -> str | None:
    """Why the run's language models did not learn, or None when they did: the arena's own
    rule (:func:`~posenc.arena.reporting.reading.not_learned`, which the run's report applies
    too). The guide then uses none of the language models' numbers as evidence
    (lost-in-the-middle judges each retrieval curve itself)."""
    return run.not_learned()


def evidence(run: Measurements, situation: Situation) -> tuple[str, ...]:
    """The lines of an arena run's numbers (:func:`posenc.arena.read_measurements`) that
    bear on ``situation``: one per experiment of ``situation.measured`` that it measured,
    and in place of the language models' ones a line saying they did not learn where
    :func:`not_learned` says so."""
    lines: list[str] = []
    unlearned = not_learned(run)
    for experiment in situation.measured:
        if unlearned and experiment in LANGUAGE_MODELS:
            continue
        lines += _READERS[experiment](run, situation.recommend)
    if unlearned and set(situation.measured) & set(LANGUAGE_MODELS):
        lines.insert(0, unlearned[0].upper() + unlearned[1:] + ".")
    return tuple(lines)
