"""context-extension end to end on the tiny preset: the records, and ``none`` zero-shot
equal to extrapolation's RoPE number at the same length (same weights, bytes and code)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from posenc.arena.data.batches import VOCAB_SIZE
from posenc.arena.experiments import context_extension, extrapolation
from posenc.arena.running.context import RunContext
from posenc.arena.running.distributed import World
from posenc.arena.running.presets import TINY
from posenc.models import TransformerLM

PRESET = replace(TINY, encodings=("rope",))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One run of both experiments in one context (they share the trained RoPE model)."""
    ctx = RunContext(PRESET, tmp_path_factory.mktemp("run"))
    extrapolation.run(ctx)
    context_extension.run(ctx)
    return ctx


def _ours(ctx):
    return [r for r in ctx.measurements if r["experiment"] == context_extension.NAME]


def test_records(run_dir):
    records = _ours(run_dir)
    p = PRESET
    expected = len(p.seeds) * len(p.extension_factors) * len(p.extension_scalings) * 2 * 2
    assert len(records) == expected
    keys = {"experiment", "encoding", "seed", "train_length", "eval_length", "metric", "value"}
    keys |= {"scaling", "factor", "stage", "mode"}
    for r in records:
        assert set(r) == keys
        assert r["encoding"] == "rope" and r["mode"] == "chunks"
        assert r["train_length"] == p.train_length
        assert r["eval_length"] == r["factor"] * p.train_length
        assert r["stage"] in ("zero-shot", "fine-tuned")
        assert r["scaling"] in p.extension_scalings
        assert math.isfinite(r["value"]) and r["value"] > 0
        if r["metric"] == "perplexity":
            assert 1.0 < r["value"] < 8 * 256  # 6 steps: near a random model's
    # both metrics are the same loss
    by_key = {}
    for r in records:
        by_key.setdefault((r["scaling"], r["factor"], r["stage"]), {})[r["metric"]] = r["value"]
    for both in by_key.values():
        assert both["bits_per_byte"] == pytest.approx(math.log2(both["perplexity"]))
    # fine-tuning trained a model per scaling and factor, and moved its number
    for (scaling, factor, stage), both in by_key.items():
        if stage == "fine-tuned":
            assert both != by_key[(scaling, factor, "zero-shot")]
    for scaling in p.extension_scalings:
        for factor in p.extension_factors:
            assert f"extend--{scaling}--x{factor}--seed0" in run_dir.timings


def test_none_zero_shot_is_extrapolation(run_dir):
    """Plain RoPE at s·L zero-shot is exactly extrapolation's RoPE chunks number at s·L;
    a real scaling changes the frequencies, so position interpolation differs."""
    zero = {
        (r["scaling"], r["eval_length"], r["metric"]): r["value"]
        for r in _ours(run_dir)
        if r["stage"] == "zero-shot"
    }
    extra = {
        (r["eval_length"], r["metric"]): r["value"]
        for r in run_dir.measurements
        if r["experiment"] == extrapolation.NAME and r["mode"] == "chunks"
    }
    for factor in PRESET.extension_factors:
        n = factor * PRESET.train_length
        for metric in ("perplexity", "bits_per_byte"):
            assert zero[("none", n, metric)] == extra[(n, metric)]
            assert zero[("linear", n, metric)] != zero[("none", n, metric)]


@pytest.mark.parametrize("scaling", context_extension.SCALINGS)
def test_every_scaling_builds(scaling):
    """Each spec is one rope accepts (the tiny preset runs only three of them)."""
    spec = context_extension.scaling_spec(scaling, 2, 8)
    model = TransformerLM(VOCAB_SIZE, 16, 1, 2, encoding=spec)
    assert model(torch.zeros(1, 16, dtype=torch.long)).shape == (1, 16, VOCAB_SIZE)


def test_finetune_batch(tmp_path):
    """Divided by s, at least one row, and a multiple of the processes."""
    ctx = RunContext(replace(TINY, finetune=replace(TINY.finetune, batch_size=16)), tmp_path)
    assert [context_extension.finetune_config(ctx, s).batch_size for s in (2, 8, 32)] == [8, 2, 1]
    ctx.place = World(rank=0, size=4, device=torch.device("cpu"))
    assert [context_extension.finetune_config(ctx, s).batch_size for s in (2, 8, 32)] == [8, 4, 4]


def test_scaling_spec():
    assert context_extension.scaling_spec("none", 4, 64) == "rope"
    assert context_extension.scaling_spec("linear", 4, 64) == {
        "name": "rope",
        "scaling": {"rope_type": "linear", "factor": 4},
    }
    yarn = context_extension.scaling_spec("yarn", 4, 64)
    assert yarn["scaling"]["original_max_position_embeddings"] == 64
    with pytest.raises(ValueError, match="unknown scaling"):
        context_extension.scaling_spec("longer", 4, 64)
