"""``extrapolation``: train at length L, evaluate at L, 2L, ... 16L (Press et al. 2022,
"Train Short, Test Long", Tables 2-3).

Every encoding gets the same model, data, budget and seed; perplexity and bits per byte are
measured at each length in both of Press et al.'s modes (non-overlapping ``chunks``, and a
``sliding`` window that scores only its last L tokens) on the same validation bytes. An
encoding that cannot run past L (``learned``) is recorded as cannot-run with the reason.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ...positions import PositionOutOfRangeError
from ..measuring.evaluate import MODES
from ..measuring.language_model import (
    cannot_run_note,
    language_model,
    lm_records,
    validation_loss,
    validation_windows,
)
from ..reporting import plotting
from ..reporting.rows import Rows, leader, significant
from ..running.context import RunContext, unit_name
from .base import Experiment, Layout

__all__ = [
    "EXPERIMENT",
    "EXTRAPOLATES",
    "NAME",
    "Extrapolation",
    "extrapolations",
    "figure",
    "run",
    "summary",
]

NAME = "extrapolation"
# An encoding extrapolates when its perplexity at the longest length is within this factor
# of its perplexity at the training length.
EXTRAPOLATES = 1.25


def run(ctx: RunContext) -> None:
    """Train (or load) the language model of every encoding and seed; measure each length."""
    for seed in ctx.preset.seeds:
        for encoding in ctx.encodings():
            ctx.unit(
                unit_name(NAME, encoding, f"seed{seed}"),
                functools.partial(_measure, ctx, encoding, seed),
            )


def _measure(ctx: RunContext, encoding: str, seed: int) -> list[dict[str, Any]]:
    preset = ctx.preset
    model = language_model(ctx, encoding, seed)
    length = preset.train_length
    cases = [(length * f, mode) for f in preset.eval_factors for mode in MODES]
    records: list[dict[str, Any]] = []
    total = sum(validation_windows(ctx, n, mode) for n, mode in cases)
    bar = ctx.progress.task(f"evaluate {encoding}", total)
    for eval_length, mode in cases:
        base = {
            "experiment": NAME,
            "encoding": encoding,
            "seed": seed,
            "train_length": length,
            "eval_length": eval_length,
            "mode": mode,
        }
        try:
            loss = validation_loss(ctx, model, eval_length, mode, bar)
        except PositionOutOfRangeError as e:
            note = cannot_run_note(e)
            records += [
                {**base, "metric": m, "value": None, "note": note}
                for m in ("perplexity", "bits_per_byte")
            ]
        else:
            records += lm_records(base, loss)
    bar.close()
    return records


# --- the report ------------------------------------------------------------------------


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

    @property
    def extrapolates(self) -> bool:
        """It ran at the longest length within :data:`EXTRAPOLATES` of its value at L."""
        return self.ratio is not None and self.ratio <= EXTRAPOLATES


def _judged_rows(measured: Rows) -> tuple[list[dict[str, Any]], Any, str | None]:
    """The extrapolation rows the summary judges, with their metric and mode."""
    rows, metric = measured.metric()
    # Chunks mode (Press et al.'s non-overlapping evaluation) judges extrapolation: at L the
    # sliding mode equals chunks, so a sliding ratio mixes in the extra context of long windows.
    modes = {r.get("mode") for r in rows}
    mode = "chunks" if "chunks" in modes else "sliding" if "sliding" in modes else None
    return [r for r in rows if r.get("mode") == mode], metric, mode


def extrapolations(measured: Rows) -> list[Extrapolation]:
    """Each encoding of a run's extrapolation (chunks mode, else sliding), in run order."""
    rows, metric, mode = _judged_rows(measured)
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


def summary(measured: Rows) -> list[str]:
    """Which encodings extrapolated (within :data:`EXTRAPOLATES` of L at the longest length),
    which did not, which could not run, and the best at L and at the longest length."""
    rows, metric, mode = _judged_rows(measured)
    if not rows:
        return []
    good: list[str] = []
    bad: list[str] = []
    cannot: list[str] = []
    for e in extrapolations(measured):
        if e.ratio is None or e.at_train is None or e.at_longest is None:
            past = f"past {e.ran_up_to}" if e.ran_up_to is not None else "at all"
            why = f" ({e.note})" if e.note else ""
            cannot.append(f"{e.encoding} cannot run {past}{why}")
            continue
        text = (
            f"{e.encoding} ({significant(e.at_train)} at L={e.train_length}, "
            f"{significant(e.at_longest)} at {e.longest}, ×{e.ratio:.3g})"
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
            parts.append(f"{what} {leader(ran)}")
    return [f"Lowest {metric}: " + "; ".join(parts) + "."] if parts else []


def figure(
    measured: Rows, title: str = "Extrapolation: trained at L, evaluated at longer lengths"
) -> Any:
    """Perplexity against evaluation length per encoding, log-log, one panel per mode
    (chunks, sliding); the training length dashed; encodings that cannot run past it listed
    in the legend as ``(cannot run past L)``. ``title`` heads it (``layer-plans`` draws its
    plans with its own)."""
    from matplotlib.ticker import NullLocator

    rows, metric = measured.metric()
    modes = plotting.values(rows, "mode")
    fig, axes = plotting.new_figure(len(modes), title)
    colors = plotting.colors(rows, "encoding")
    for ax, mode in zip(axes, modes, strict=False):
        here = [r for r in rows if r.get("mode") == mode]
        for encoding in dict.fromkeys(r["encoding"] for r in here):
            mine = [r for r in here if r["encoding"] == encoding]
            ran = [r["eval_length"] for r in mine if r["mean"] is not None]
            label = encoding
            if len(ran) < len(mine):
                label += f" (cannot run past {max(ran)})" if ran else " (cannot run)"
            line = plotting.line(ax, mine, "eval_length", color=colors[encoding], label=label)
            if line is None:  # still named in the legend
                ax.plot([], [], color=colors[encoding], label=label)
        for length in sorted({r["train_length"] for r in here}):
            ax.axvline(length, color="grey", linestyle="--", linewidth=1, label=f"L = {length}")
        ax.set_xscale("log", base=2)
        plotting.log_y(ax)
        lengths = plotting.values(here, "eval_length")
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(f"mode: {mode}" if mode is not None else "")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(plotting.unit(metric))
    if rows:  # one legend for both panels, beside them: the lines stay visible
        axes[-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    else:
        plotting.empty(axes[0])
    return fig


EXPERIMENT = Experiment(
    name=NAME,
    title="Extrapolation",
    run=run,
    layout=Layout(
        ("mode",), "eval_length", (), ("perplexity", "bits_per_byte", "loss"), multiples=True
    ),
    figure=figure,
    alt="Perplexity against evaluation length per encoding, log-log, per mode",
    summary=summary,
)
