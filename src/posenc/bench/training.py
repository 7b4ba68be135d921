"""Case 4: one training step of :class:`~posenc.models.TransformerLM` with each encoding.

A step is what the arena does per batch: forward, next-token cross-entropy, backward and
an AdamW update, on random tokens. Every encoding of :func:`posenc.available` that
TransformerLM accepts (1-D positions; a learned table long enough for the length) gets a
model of the same size; the models of one length are timed in turns, and ``nope`` (no
positional term) is the floor. All lengths' models are built first and timed a round of
every row at a time (:func:`~posenc.bench.timing.interleaved_rows`), so another tenant's
busy spell falls on a round or two of each row, not on every round of one. Tokens per
second are ``batch * length`` over the median step.

Issue 13's reference size: dim 256, 4 layers, 8 heads, batch 4, length 512.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .. import registry
from ..models import TransformerLM
from .timing import interleaved_rows, row

__all__ = ["FLOOR", "encodings", "run"]

FLOOR = "nope"
VOCAB = 256


def encodings() -> list[str]:
    """Every registered encoding, ``nope`` first."""
    return [FLOOR, *(n for n in registry.available() if n != FLOOR)]


def _model(name: str, length: int, dim: int, n_layers: int, n_heads: int) -> TransformerLM:
    encoding: Any = name
    if name == "learned":  # its table must cover the length
        encoding = {"name": name, "max_positions": length}
    return TransformerLM(VOCAB, dim, n_layers, n_heads, encoding=encoding)


def _step(model: TransformerLM, tokens: torch.Tensor) -> Callable[[], None]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()

    return step


def run(
    lengths: Sequence[int],
    names: Sequence[str] | None = None,
    dim: int = 256,
    n_layers: int = 4,
    n_heads: int = 8,
    batch: int = 4,
    repeat: int = 3,
    warmup: int = 1,
) -> list[dict[str, Any]]:
    """One record per length; each result also has ``tokens_per_s``. Encodings that
    TransformerLM refuses are skipped with its message."""
    chosen = list(names) if names is not None else encodings()
    rows: list[dict[str, Callable[[], Any]]] = []
    skips: list[dict[str, str]] = []
    for length in lengths:
        torch.manual_seed(0)
        tokens = torch.randint(0, VOCAB, (batch, length + 1))
        calls: dict[str, Callable[[], Any]] = {}
        skipped: dict[str, str] = {}
        for name in chosen:
            try:
                model = _model(name, length, dim, n_layers, n_heads).train()
            except (ValueError, TypeError) as e:
                skipped[name] = f"unsupported: {e}"[:200]
                continue
            calls[name] = _step(model, tokens)
        rows.append(calls)
        skips.append(skipped)
    stats = interleaved_rows(rows, repeat=repeat, warmup=warmup)
    records = []
    for length, calls, skipped, row_stats in zip(lengths, rows, skips, stats, strict=True):
        config = {
            "length": length,
            "dim": dim,
            "n_layers": n_layers,
            "n_heads": n_heads,
            "batch": batch,
        }
        floor = FLOOR if FLOOR in calls else None
        record = row(config, row_stats, floor, skipped)
        for result in record["results"].values():
            result["tokens_per_s"] = batch * length / (result["median_ms"] / 1e3)
        records.append(record)
    return records
