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
from ..evaluate import MODES, bits_per_byte, lm_loss, perplexity
from ..runner import RunContext, unit_name
from .language_model import language_model

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
    lengths = [length * f for f in preset.eval_factors]
    valid = ctx.corpus.valid
    records: list[dict[str, Any]] = []
    bar = ctx.progress.task(f"evaluate {encoding}", len(lengths) * len(MODES))
    for eval_length in lengths:
        for mode in MODES:
            base = {
                "experiment": NAME,
                "encoding": encoding,
                "seed": seed,
                "train_length": length,
                "eval_length": eval_length,
                "mode": mode,
            }
            try:
                loss = lm_loss(
                    model,
                    valid,
                    eval_length,
                    mode,
                    n_tokens=preset.eval_tokens,
                    stride=length,
                    start=max(lengths),  # every sliding window has its full context
                )
            except PositionOutOfRangeError as e:
                note = f"cannot run past {e.limit_name}={e.limit} positions"
                records += [
                    {**base, "metric": m, "value": None, "note": note}
                    for m in ("perplexity", "bits_per_byte")
                ]
            else:
                records += [
                    {**base, "metric": "perplexity", "value": perplexity(loss)},
                    {**base, "metric": "bits_per_byte", "value": bits_per_byte(loss)},
                ]
            bar.advance(1)
    bar.close()
    return records
