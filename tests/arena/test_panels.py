"""posenc.arena.reporting.panels: the terminal tables of a run's numbers and the rows they read."""

from __future__ import annotations

import inspect
import sys

import pytest

from posenc.arena.experiments import EXPERIMENTS
from posenc.arena.reporting import figures, summary
from posenc.arena.reporting import panels as P
from posenc.arena.reporting.records import aggregate


def test_table_extrapolation(fake_results):
    text = P.table(fake_results, "extrapolation")
    assert "mode chunks" in text and "mode sliding" in text
    for label in ("64 (L)", "128 (2L)", "512 (8L)"):
        assert label in text
    rows = aggregate(fake_results["measurements"])
    alibi = next(
        r
        for r in rows
        if r["encoding"] == "alibi" and r.get("mode") == "sliding" and r["eval_length"] == 512
    )
    assert f"{alibi['mean']:.4g} ± {alibi['std']:.2g}" in text
    learned = next(line for line in text.splitlines() if "learned" in line)
    assert learned.count("cannot run") == 3
    assert "\x1b[" not in text  # no colour codes
    assert max(len(line) for line in text.splitlines()) <= 120


def test_table_every_experiment(fake_results):
    text = P.table(fake_results)
    for name in EXPERIMENTS:
        assert f"{name}:" in text
    assert "×4" in text  # context extension factors as columns
    assert "bidirectional" in text and "hf:sshleifer/tiny-gpt2" in text


def test_table_missing_and_unknown(fake_results):
    only = {**fake_results, "measurements": fake_results["measurements"][:1]}
    assert P.table(only, "lost-in-the-middle") == "no measurements for lost-in-the-middle\n"
    with pytest.raises(ValueError, match="unknown experiment"):
        P.table(fake_results, "extrapolate")


def test_table_docstring_says_the_width_it_renders():
    width = inspect.signature(P.render).parameters["width"].default
    assert f"{width} columns" in (P.table.__doc__ or "")


def test_metric_rows(fake_results):
    measurements = fake_results["measurements"]
    rows, metric = P.metric_rows(measurements, "extrapolation")
    assert metric == "perplexity"
    expected = [r for r in aggregate(measurements) if r["experiment"] == "extrapolation"]
    assert rows == expected
    measurements += [
        {**m, "metric": "token_accuracy", "value": 0.5}
        for m in measurements
        if m["experiment"] == "length-generalization" and m["encoding"] == "rope"
    ]
    tokens, metric = P.metric_rows(measurements, "length-generalization", "token_accuracy")
    assert metric == "token_accuracy" and {r["encoding"] for r in tokens} == {"rope"}
    assert {r["metric"] for r in P.metric_rows(measurements, "length-generalization")[0]} == {
        "accuracy"
    }
    assert P.metric_rows(measurements, "lost-in-the-middle", "perplexity") == ([], "perplexity")


def test_summary_and_figures_read_rows_with_metric_rows():
    """One helper, not a copy in each module: the reporting modules hand each experiment
    its rows from P.experiment_rows (P.metric_rows reads them too); no experiment module
    aggregates records itself."""
    for module in (summary, figures):
        assert module.experiment_rows is P.experiment_rows
        assert not hasattr(module, "_rows")
    for record in EXPERIMENTS.values():
        module = sys.modules[record.run.__module__]
        assert not hasattr(module, "_rows") and not hasattr(module, "aggregate")
