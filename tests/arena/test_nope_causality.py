"""nope-needs-causality end to end on the tiny preset: the records, their agreement with
extrapolation and the training loss, and the reason NoPE fails without a causal mask (a
bidirectional NoPE model is permutation-equivariant; a sinusoidal one is not)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from posenc.arena.data.batches import MASK_ID
from posenc.arena.data.tasks import IGNORE, TaskBatch
from posenc.arena.experiments import extrapolation, nope_causality
from posenc.arena.running.context import RunContext
from posenc.arena.running.presets import TINY
from posenc.arena.running.training import scored_loss

PRESET = replace(TINY, encodings=nope_causality.ENCODINGS)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    """One run of both experiments in one context (they share the causal models)."""
    ctx = RunContext(PRESET, tmp_path_factory.mktemp("run"))
    extrapolation.run(ctx)
    nope_causality.run(ctx)
    return ctx


def _ours(ctx):
    return [r for r in ctx.measurements if r["experiment"] == nope_causality.NAME]


def test_records(ctx):
    records = _ours(ctx)
    assert len(records) == len(PRESET.seeds) * len(nope_causality.ENCODINGS) * 2 * 2
    keys = {"experiment", "encoding", "seed", "train_length", "eval_length", "metric", "value"}
    values = {}
    for r in records:
        assert set(r) == keys | {"mode"}
        assert r["train_length"] == r["eval_length"] == PRESET.train_length
        assert r["mode"] in ("causal", "bidirectional")
        assert r["metric"] in ("perplexity", "loss")
        assert math.isfinite(r["value"]) and r["value"] > 0
        values[(r["encoding"], r["seed"], r["mode"], r["metric"])] = r["value"]
    assert {k[0] for k in values} == set(nope_causality.ENCODINGS)
    for (encoding, seed, mode, metric), value in values.items():
        if metric == "perplexity":
            assert 1.0 < value < 8 * 257  # 4 to 6 steps: near a random model's
            assert math.log(value) == pytest.approx(values[(encoding, seed, mode, "loss")])
    # the causal number is extrapolation's at L (same model, bytes and windows)
    for r in ctx.measurements:
        if (
            r["experiment"] == extrapolation.NAME
            and r["mode"] == "chunks"
            and r["eval_length"] == PRESET.train_length
            and r["metric"] == "perplexity"
        ):
            assert values[(r["encoding"], r["seed"], "causal", "perplexity")] == r["value"]
    assert "mlm--nope--seed0" in ctx.timings


def test_eval_batches(ctx):
    """Deterministic, enough masked tokens, and the loss is the training loss's mean."""
    batches = nope_causality.masked_eval_batches(ctx, 0)
    again = nope_causality.masked_eval_batches(ctx, 0)
    for a, b in zip(batches, again, strict=True):
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert sum(int((b.targets != IGNORE).sum()) for b in batches) >= PRESET.eval_tokens
    model = nope_causality.masked_model(ctx, "rope", 0)
    with torch.no_grad():
        expected = scored_loss(model, batches[0]).item()
    assert nope_causality.masked_loss(model, batches[:1]) == pytest.approx(expected, rel=1e-5)


def _shuffled(batch: TaskBatch, generator: torch.Generator) -> torch.Tensor:
    """The inputs with each row's unmasked tokens permuted among their places."""
    inputs = batch.inputs.clone()
    for row in inputs:
        kept = (row != MASK_ID).nonzero().squeeze(1)
        row[kept] = row[kept[torch.randperm(kept.numel(), generator=generator)]]
    return inputs


@pytest.mark.parametrize("encoding", ["nope", "sinusoidal"])
def test_bidirectional_nope_cannot_tell_order(ctx, encoding, model_tol):
    """Shuffling a row's unmasked context leaves NoPE's prediction at every masked token
    unchanged up to rounding (the sums run in another order); sinusoidal's moves."""
    model = nope_causality.masked_model(ctx, encoding, 0)
    batch = nope_causality.masked_eval_batches(ctx, 0)[0]
    shuffled = _shuffled(batch, torch.Generator().manual_seed(0))
    assert not torch.equal(shuffled, batch.inputs)
    masked = batch.targets != IGNORE
    with torch.no_grad():
        before = model(batch.inputs).log_softmax(-1)[masked]  # [n_masked, vocab]
        after = model(shuffled).log_softmax(-1)[masked]
    tolerance = model_tol(model, PRESET.train_length, before)
    if encoding == "nope":
        torch.testing.assert_close(after, before, **tolerance)
    else:
        assert not torch.allclose(after, before, **tolerance)
