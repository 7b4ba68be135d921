"""layer-plans end to end on the tiny preset (the plans, the records, the same budget,
resuming without recomputing finished units), and its summary on crafted rows."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from posenc.arena.experiments import EXPERIMENTS, NAMES
from posenc.arena.experiments import layer_plans as lp
from posenc.arena.measuring.evaluate import MODES
from posenc.arena.reporting.rows import Rows
from posenc.arena.running.context import RunContext
from posenc.arena.running.presets import TINY, ModelSize
from posenc.models.spec import describe_encoding

PRESET = TINY  # one layer: the experiment raises it to 4


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    ctx = RunContext(PRESET, tmp_path_factory.mktemp("run"))
    lp.run(ctx)
    return ctx


def _layers(plan):
    return [(describe_encoding(s.encoding), s.pattern.describe()) for s in plan]


def test_registered_after_extrapolation():
    assert NAMES.index(lp.NAME) == NAMES.index("extrapolation") + 1
    assert EXPERIMENTS[lp.NAME] is lp.EXPERIMENT


def test_the_plans_at_four_layers():
    assert lp.model_size(PRESET) == ModelSize(PRESET.model.dim, 4, PRESET.model.n_heads)
    deeper = replace(PRESET, model=ModelSize(16, 6, 2))
    assert lp.model_size(deeper) == deeper.model  # never fewer layers than the preset's
    assert lp.local_window(PRESET) == PRESET.train_length // 4
    w = f"window {lp.local_window(PRESET)}"
    rope, nope = ("rope", "full"), ("nope", "full")
    assert {name: _layers(plan) for name, plan in lp.plans(PRESET).items()} == {
        "rope": [rope] * 4,
        "nope": [nope] * 4,
        "nope-every-4": [rope, rope, rope, nope],
        "rope-local-nope-global": [("rope", w)] * 3 + [nope],
        "alibi": [("alibi", "full")] * 4,
        "fox": [("fox", "full")] * 4,
        "pope": [("pope", "full")] * 4,
    }


def test_records(ctx):
    records = ctx.measurements
    lengths = [PRESET.train_length * f for f in PRESET.eval_factors]
    expected = {
        (name, seed, n, mode, metric)
        for name in lp.PLANS
        for seed in PRESET.seeds
        for n in lengths
        for mode in MODES
        for metric in ("perplexity", "bits_per_byte")
    }
    assert len(records) == len(expected)
    assert {
        (r["encoding"], r["seed"], r["eval_length"], r["mode"], r["metric"]) for r in records
    } == expected
    keys = {"experiment", "encoding", "seed", "train_length", "eval_length", "metric", "value"}
    values = {}
    for r in records:
        local = r["encoding"] == lp.LOCAL
        assert set(r) == keys | {"mode", "n_layers"} | ({"window"} if local else set())
        assert r["experiment"] == lp.NAME and r["train_length"] == PRESET.train_length
        assert r["n_layers"] == 4
        assert not local or r["window"] == lp.local_window(PRESET)
        assert math.isfinite(r["value"]) and r["value"] > 0
        values[(r["encoding"], r["eval_length"], r["mode"], r["metric"])] = r["value"]
    for (name, n, mode, metric), value in values.items():
        if metric == "perplexity":
            assert 1.0 < value < 8 * 257  # 6 steps: near a random model's
            assert math.log2(value) == pytest.approx(values[(name, n, mode, "bits_per_byte")])


def test_same_budget(ctx):
    """Every plan trained the language model's recipe on the same batches."""
    for seed in PRESET.seeds:
        timings = [ctx.timings[f"plan--{name}--seed{seed}"] for name in lp.PLANS]
        assert {t["steps"] for t in timings} == {PRESET.lm.steps}
        assert all(t["tokens_per_s"] > 0 for t in timings)


def test_resume_recomputes_only_unfinished_units(ctx):
    """A run killed after some units is resumed: finished units are loaded (their files
    untouched, no training), the missing one is measured again on the saved weights and
    gives the same numbers."""
    units = ctx.run_dir / "units"
    lost = units / f"{lp.NAME}--nope--seed0.json"
    lost.unlink()  # as if killed before this unit's measurements were written
    mtimes = {p: p.stat().st_mtime_ns for p in units.iterdir()}
    again = RunContext(PRESET, ctx.run_dir)
    lp.run(again)
    assert again.measurements == ctx.measurements
    assert again.timings == ctx.timings
    assert lost.exists()
    assert {p: p.stat().st_mtime_ns for p in units.iterdir() if p != lost} == mtimes


def test_figure(ctx):
    fig = lp.figure(Rows.of(ctx.measurements, lp.NAME, lp.EXPERIMENT.layout.metrics))
    labels = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert labels[: len(lp.PLANS)] == list(lp.PLANS)
    assert "Layer plans" in fig._suptitle.get_text()


# --- the summary on crafted rows -----------------------------------------------------------

L = 64


def _rows(values: dict[str, dict[int, list[float]]]) -> Rows:
    """Rows of ``{plan: {eval_length: [value per seed]}}`` (chunks and sliding alike)."""
    records = []
    for plan, by_length in values.items():
        extra = {"window": 16} if plan == lp.LOCAL else {}
        for n, per_seed in by_length.items():
            for seed, value in enumerate(per_seed):
                for mode in MODES:
                    records.append(
                        {"experiment": lp.NAME, "encoding": plan, "seed": seed,
                         "train_length": L, "eval_length": n, "metric": "perplexity",
                         "value": value, "mode": mode, "n_layers": 4, **extra}
                    )  # fmt: skip
    return Rows.of(records, lp.NAME, lp.EXPERIMENT.layout.metrics)


def test_summary_one_seed():
    text = lp.summary(
        _rows(
            {
                "rope": {64: [6.0], 1024: [12.0]},
                "nope-every-4": {64: [6.2], 1024: [6.6]},
                lp.LOCAL: {64: [6.4], 1024: [6.5]},
            }
        )
    )
    head, flat, lowest, retrieval = text
    assert head.startswith("Layer plans (perplexity, chunks mode, one seed, 4 layers, ")
    assert "local window 16 = L/4" in head
    assert "rope 6 at L=64, 12 at 1024 (×2)" in head
    assert flat == f"Flat to 1024 tokens (within 1.25× of L): nope-every-4, {lp.LOCAL}."
    assert lowest == (
        f"Lowest perplexity: at L=64 rope (6); at 1024 {lp.LOCAL} (6.5); "
        "one seed, so no seed spread to judge these gaps by."
    )
    assert "<" not in lowest and "≈" not in lowest
    assert retrieval == lp.RETRIEVAL and "not per layer plan" in retrieval


def test_summary_orders_only_beyond_the_seed_spread():
    text = lp.summary(
        _rows(
            {
                "rope": {64: [6.0, 6.2], 1024: [12.0, 12.4]},
                "nope-every-4": {64: [6.1, 6.3], 1024: [7.0, 7.2]},  # tied with rope at L
                "alibi": {64: [7.0, 7.2], 1024: [7.05, 7.25]},  # tied with nope-every-4 far
            }
        )
    )
    order = next(s for s in text if s.startswith("In order"))
    assert "2 seeds" in text[0] and "one seed" not in " ".join(text)
    assert "at L=64: rope 6.1 ≈ nope-every-4 6.2 < alibi 7.1" in order
    assert "at 1024: nope-every-4 7.1 ≈ alibi 7.15 < rope 12.2" in order
    assert "window" not in text[0]  # no local plan among these rows
    assert text[-1] == lp.RETRIEVAL


def test_summary_without_rows_says_nothing():
    assert lp.summary(Rows(lp.NAME, (), ("perplexity",))) == []
