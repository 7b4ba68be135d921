"""``extrapolation``: train at length L, evaluate at L, 2L, ... 16L (Press et al. 2022,
"Train Short, Test Long", Tables 2-3).

Every encoding gets the same model, data, budget and seed; perplexity and bits per byte are
measured at each length in both of Press et al.'s modes (non-overlapping ``chunks``, and a
``sliding`` window that scores only its last L tokens) on the same validation bytes. An
encoding that cannot run past L (``learned``) is recorded as cannot-run with the reason.
"""

from __future__ import annotations

import functools
from typing import Any

from ...positions import PositionOutOfRangeError
from ..evaluate import MODES
from ..runner import RunContext, unit_name
from .language_model import (
    cannot_run_note,
    language_model,
    lm_records,
    validation_loss,
    validation_windows,
)

__all__ = ["NAME", "run"]

NAME = "extrapolation"


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
