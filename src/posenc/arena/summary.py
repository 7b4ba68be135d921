"""The arena's "What this run says": sentences computed from a run's numbers (means over
seeds), one function per experiment, gathered by :func:`summary` for the report."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .panels import metric_rows

__all__ = ["EXTRAPOLATES", "Curve", "Extrapolation", "extrapolations", "kv_curves", "summary"]

# An encoding extrapolates when its perplexity at the longest length is within this factor
# of its perplexity at the training length.
EXTRAPOLATES = 1.25
# Lost in the middle: the middle is "lost" when its accuracy is this far below both ends.
_U_MARGIN = 0.05


def _g(value: float) -> str:
    """Three significant digits, without an exponent up to a million."""
    return f"{value:,.0f}" if 1e3 <= abs(value) < 1e6 else f"{value:.3g}"


@dataclass(frozen=True)
class Extrapolation:
    """One encoding's extrapolation as the summary judges it: mean ``metric`` over seeds at
    ``train_length`` (else the shortest length measured) and at ``longest`` (None where it
    could not run: ``note`` says why, ``ran_up_to`` the longest length it ran at, if any)."""

    encoding: str
    metric: str | None
    mode: str | None
    train_length: int
    at_train: float | None
    longest: int
    at_longest: float | None
    ran_up_to: int | None
    note: str | None

    @property
    def ratio(self) -> float | None:
        """``at_longest / at_train`` (None if either did not run); ≤ EXTRAPOLATES: it did."""
        if self.at_train is None or self.at_longest is None:
            return None
        return self.at_longest / self.at_train


def _judged_rows(results: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Any, str | None]:
    """The extrapolation rows the summary judges, with their metric and mode."""
    rows, metric = metric_rows(results["measurements"], "extrapolation")
    # Chunks mode (Press et al.'s non-overlapping evaluation) judges extrapolation: at L the
    # sliding mode equals chunks, so a sliding ratio mixes in the extra context of long windows.
    modes = {r.get("mode") for r in rows}
    mode = "chunks" if "chunks" in modes else "sliding" if "sliding" in modes else None
    return [r for r in rows if r.get("mode") == mode], metric, mode


def extrapolations(results: Mapping[str, Any]) -> list[Extrapolation]:
    """Each encoding of a run's extrapolation (chunks mode, else sliding), in run order."""
    rows, metric, mode = _judged_rows(results)
    if not rows:
        return []
    longest = max(r["eval_length"] for r in rows)
    out = []
    for encoding in dict.fromkeys(r["encoding"] for r in rows):
        mine = {r["eval_length"]: r for r in rows if r["encoding"] == encoding}
        train = mine[min(mine)]["train_length"]
        at_l = mine.get(train, mine[min(mine)])  # at L, else the shortest length measured
        far = mine[longest]["mean"] if longest in mine else None
        ran = max((n for n, r in mine.items() if r["mean"] is not None), default=None)
        note = next((r.get("note") for r in mine.values() if r["mean"] is None), None)
        out.append(
            Extrapolation(
                encoding, metric, mode, at_l["eval_length"], at_l["mean"], longest, far, ran, note
            )
        )
    return out


def _extrapolation(results: Mapping[str, Any]) -> list[str]:
    rows, metric, mode = _judged_rows(results)
    if not rows:
        return []
    good: list[str] = []
    bad: list[str] = []
    cannot: list[str] = []
    for e in extrapolations(results):
        if e.ratio is None or e.at_train is None or e.at_longest is None:
            past = f"past {e.ran_up_to}" if e.ran_up_to is not None else "at all"
            why = f" ({e.note})" if e.note else ""
            cannot.append(f"{e.encoding} cannot run {past}{why}")
            continue
        text = (
            f"{e.encoding} ({_g(e.at_train)} at L={e.train_length}, "
            f"{_g(e.at_longest)} at {e.longest}, ×{e.ratio:.3g})"
        )
        (good if e.ratio <= EXTRAPOLATES else bad).append(text)
    longest = max(r["eval_length"] for r in rows)
    where = f"{metric}, {mode} mode" if mode else str(metric)
    out = []
    if good:
        out.append(
            f"Extrapolated ({where}: within {EXTRAPOLATES}× of L at {longest} tokens): "
            + "; ".join(good)
            + "."
        )
    if bad:
        out.append(f"Did not extrapolate ({where}): " + "; ".join(bad) + ".")
    if cannot:
        out.append("Could not run: " + "; ".join(cannot) + ".")
    out.extend(_best_at(rows, metric, longest))
    return out


def _best_at(rows: list[dict[str, Any]], metric: str | None, longest: int) -> list[str]:
    """Which encoding is best at the training length and which at the longest length."""
    train = min(r["train_length"] for r in rows)
    parts = []
    for length, what in ((train, "at L"), (longest, f"at {longest} tokens")):
        ran = [r for r in rows if r["eval_length"] == length and r["mean"] is not None]
        if ran:
            best = min(ran, key=lambda r: r["mean"])
            parts.append(f"{what} {best['encoding']} ({_g(best['mean'])})")
    return [f"Lowest {metric}: " + "; ".join(parts) + "."] if parts else []


def _context_extension(results: Mapping[str, Any]) -> list[str]:
    rows, metric = metric_rows(results["measurements"], "context-extension")
    out = []
    for factor in sorted({r["factor"] for r in rows if "factor" in r}):
        parts = []
        for stage in ("zero-shot", "fine-tuned"):
            here = [
                r
                for r in rows
                if r.get("factor") == factor and r.get("stage") == stage and r["mean"] is not None
            ]
            if not here:
                continue
            best = min(here, key=lambda r: r["mean"])
            none = next((r for r in here if r.get("scaling") == "none"), None)
            text = f"best {stage} {best.get('scaling')} ({metric} {_g(best['mean'])}"
            if none is not None and best is not none:
                text += f" vs {_g(none['mean'])} with none, ×{best['mean'] / none['mean']:.2g}"
            parts.append(text + ")")
        if parts:
            out.append(f"Context extension ×{factor}: " + "; ".join(parts) + ".")
    return out


def _length_generalization(results: Mapping[str, Any]) -> list[str]:
    rows, metric = metric_rows(results["measurements"], "length-generalization")
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
        fit = max(learned, key=lambda r: r["mean"]) if learned else None
        text = f"Length generalisation ({task}, trained up to {train}): "
        if fit is not None:
            text += f"at {train} the best is {fit['encoding']} ({metric} {fit['mean']:.2f}); "
        if best["mean"] > 0:
            text += f"at {longest} the best is {best['encoding']} ({best['mean']:.2f})"
        else:
            text += f"no encoding gets a whole string right at {longest}"
        tokens = [
            r
            for r in metric_rows(
                results["measurements"], "length-generalization", "token_accuracy"
            )[0]
            if r.get("task") == task and r["eval_length"] == longest and r["mean"] is not None
        ]
        if tokens:
            top = max(tokens, key=lambda r: r["mean"])
            text += f"; per token, {top['encoding']} keeps the most ({top['mean']:.2f})"
        out.append(text + ".")
    return out


def _nope(results: Mapping[str, Any]) -> list[str]:
    rows, metric = metric_rows(results["measurements"], "nope-needs-causality")
    nope = {r.get("mode"): r["mean"] for r in rows if r["encoding"] == "nope"}
    others: dict[Any, list[float]] = {}
    for r in rows:
        if r["encoding"] != "nope" and r["mean"] is not None:
            others.setdefault(r.get("mode"), []).append(r["mean"])
    out = []
    for mode, verb in (("causal", "works"), ("bidirectional", "fails")):
        mine, theirs = nope.get(mode), others.get(mode)
        if mine is None or not theirs:
            continue
        ref = statistics.median(theirs)
        ratio = mine / ref
        if verb == "works":
            yes = ratio <= EXTRAPOLATES
            what = "works causally" if yes else "does not work causally"
        else:
            yes = ratio > EXTRAPOLATES
            what = "fails bidirectionally" if yes else "does not fail bidirectionally"
        out.append(
            f"NoPE {what}: {mode} {metric} {_g(mine)} vs {_g(ref)} for the other encodings "
            f"(median of {len(theirs)}; ×{ratio:.3g})."
        )
    return out


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


def kv_curves(results: Mapping[str, Any]) -> tuple[list[Curve], str | None]:
    """A run's lost-in-the-middle curves (encodings with at least three gold positions that
    ran, query-last placement first) and their metric; ``([], None)`` without the experiment."""
    rows, metric = metric_rows(results["measurements"], "lost-in-the-middle")
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


def _lost_in_the_middle(results: Mapping[str, Any]) -> list[str]:
    """Per query placement, at the trained number of pairs: the accuracy at the first, middle
    and last gold position per encoding (U-shaped or not), or that retrieval was not learned
    (mean accuracy under 1.5x that of answering a random value of the context)."""
    curves, metric = kv_curves(results)
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


def summary(results: Mapping[str, Any]) -> list[str]:
    """The "What this run says" sentences, computed from the numbers (means over seeds)."""
    return [
        *_extrapolation(results),
        *_context_extension(results),
        *_length_generalization(results),
        *_nope(results),
        *_lost_in_the_middle(results),
    ]
