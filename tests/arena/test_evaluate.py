"""Scoring a language model: lm_loss's windows and progress, and the helpers every
language-model experiment shares (validation_loss, lm_records, encoding_spec,
cannot_run_note), including a diverged model whose NaN loss must not crash the run."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import posenc
from posenc.arena.experiments import extrapolation
from posenc.arena.measuring import language_model as lm
from posenc.arena.measuring.evaluate import _same_size, lm_loss, windows
from posenc.arena.reporting.results import check_measurement
from posenc.arena.running.context import RunContext
from posenc.arena.running.presets import TINY
from posenc.positions import PositionOutOfRangeError


class _Stub(nn.Module):
    """Logits of ``value`` everywhere (NaN: a diverged model; 0: uniform)."""

    def __init__(self, value: float, vocab: int = 256) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.value, self.vocab = value, vocab

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.full((*ids.shape, self.vocab), self.value) + self.weight


class _Bar:
    """A progress bar that remembers what it was told."""

    def __init__(self) -> None:
        self.steps, self.tokens = 0, 0

    def advance(self, steps: int = 1, tokens: int = 0, **fields: Any) -> None:
        self.steps += steps
        self.tokens += tokens


TOKENS = torch.arange(1000) % 256


@pytest.mark.parametrize(("length", "mode"), [(16, "chunks"), (40, "chunks"), (40, "sliding")])
def test_lm_loss_counts_windows_and_tokens_on_its_bar(length: int, mode: str) -> None:
    spans = list(windows(100, length, mode, stride=8, start=64))
    bar = _Bar()
    loss = lm_loss(_Stub(0.0), TOKENS, length, mode, n_tokens=100, stride=8, start=64, bar=bar)  # type: ignore[arg-type]
    assert loss == pytest.approx(math.log(256))  # uniform logits
    assert bar.steps == len(spans)
    width = (lambda s: s) if mode == "chunks" else (lambda s: length)
    assert bar.tokens == sum(width(s) for _, s in spans)


def test_same_size_groups_windows_by_scored_tokens() -> None:
    group = [(0, 8), (8, 8), (16, 3)]
    assert _same_size(group) == [[(0, 8), (8, 8)], [(16, 3)]]


def test_lm_records_of_a_finite_and_a_non_finite_loss() -> None:
    base = {"experiment": "extrapolation", "encoding": "rope", "seed": 0}
    base |= {"train_length": 8, "eval_length": 8}
    ok = lm.lm_records(base, math.log(4.0))
    assert [(r["metric"], r["value"]) for r in ok] == [
        ("perplexity", pytest.approx(4.0)),
        ("bits_per_byte", pytest.approx(2.0)),
    ]
    nan = lm.lm_records(
        base, lm_loss(_Stub(math.nan), TOKENS, 16, "chunks", n_tokens=64, stride=16, start=0)
    )
    assert [r["value"] for r in nan] == [None, None]
    assert {r["note"] for r in nan} == {"non-finite loss"}
    # a finite loss whose perplexity is past a float: only the perplexity is None
    huge = {r["metric"]: r for r in lm.lm_records(base, 1000.0, ("perplexity", "loss"))}
    assert huge["perplexity"]["value"] is None and "overflows" in huge["perplexity"]["note"]
    assert huge["loss"]["value"] == 1000.0
    for r in [*ok, *nan, *huge.values()]:
        check_measurement(r)
        json.dumps(r, allow_nan=False)


def test_a_diverged_model_is_recorded_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extrapolation with a model whose logits are NaN: the unit is written (JSON has no
    NaN) and every value is None with the reason."""
    monkeypatch.setattr(extrapolation, "language_model", lambda ctx, e, s: _Stub(math.nan))
    ctx = RunContext(dataclasses.replace(TINY, encodings=("rope",), seeds=(0,)), tmp_path)
    extrapolation.run(ctx)
    assert ctx.measurements and all(
        r["value"] is None and r["note"] == "non-finite loss" for r in ctx.measurements
    )
    assert len(list((tmp_path / "units").glob("extrapolation--*.json"))) == 1


def test_validation_loss_is_lm_loss_on_the_bytes_extrapolation_scores(tmp_path: Path) -> None:
    ctx = RunContext(TINY, tmp_path)
    L = TINY.train_length
    model = posenc.models.TransformerLM(256, 16, 1, 2, encoding="rope")
    bar = _Bar()
    got = lm.validation_loss(ctx, model, 2 * L, "sliding", bar)  # type: ignore[arg-type]
    start = L * max(TINY.eval_factors)
    kwargs = {"n_tokens": TINY.eval_tokens, "stride": L, "start": start}
    assert got == lm_loss(model, ctx.corpus.valid, 2 * L, "sliding", **kwargs)
    assert bar.steps == lm.validation_windows(ctx, 2 * L, "sliding") > 1


def test_encoding_spec_bounds_a_table_by_its_config() -> None:
    """An encoding with a ``max_positions`` config key gets a table of the trained length,
    one with a ``train_length`` key (FoPE's clip) that length; the others are named as they
    are."""
    for name in posenc.available():
        fields = {f.name for f in dataclasses.fields(posenc.registry.get(name).Config)}
        spec = lm.encoding_spec(name, 48)
        known = {k: 48 for k in ("max_positions", "train_length") if k in fields}
        assert spec == ({"name": name, **known} if known else name)
    assert lm.encoding_spec("learned", 48) == {"name": "learned", "max_positions": 48}
    assert lm.encoding_spec("fope", 64) == {"name": "fope", "train_length": 64}


def test_cannot_run_note_names_the_limit() -> None:
    model = posenc.models.TransformerLM(256, 16, 1, 2, encoding=lm.encoding_spec("learned", 8))
    with pytest.raises(PositionOutOfRangeError) as caught:
        model(torch.zeros(1, 9, dtype=torch.long))
    assert lm.cannot_run_note(caught.value) == "cannot run past max_positions=8 positions"
