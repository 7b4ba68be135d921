"""posenc.arena.reporting.panels: the terminal tables of a run's numbers and the rows they read."""

from __future__ import annotations

import sys

import pytest
from rich.cells import cell_len

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
    assert max(cell_len(line) for line in text.splitlines()) <= 80


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


@pytest.mark.parametrize("columns", [None, "60", "140"])
def test_table_fits_the_terminal_80_columns_off_one(fake_results, monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 80)
    text = P.table(fake_results)
    assert max(cell_len(line) for line in text.splitlines()) <= width
    assert "…" not in text  # no cell cut
    assert P.table(fake_results, width=width) == text
    with pytest.raises(ValueError, match="width"):
        P.table(fake_results, width=0)


def _curve(n_positions=16, encodings=("nope", "sinusoidal", "rope", "t5", "alibi")):
    """A lost-in-the-middle panel: a row per encoding, a column per gold position."""
    header = ("encoding", *(str(g) for g in range(n_positions)))
    rows = tuple((e, *(f"0.{i:02d} ± 0.015" for i in range(n_positions))) for e in encodings)
    return P.Panel("lost-in-the-middle: accuracy", 1, header, rows)


def test_transposed_spread_and_split_keep_every_cell():
    rows = (("rope", "", "1 ± 0.1", "2", "3"), ("nope", "16", "4", "5", "6 ± 0.2"))
    panel = P.Panel("t", 2, ("encoding", "window", "64", "128", "256"), rows)
    assert P.transposed(panel, "eval length") == P.Panel(
        "t", 1, ("eval length", "rope", "nope 16"),
        (("64", "1 ± 0.1", "4"), ("128", "2", "5"), ("256", "3", "6 ± 0.2")),
    )  # fmt: skip
    assert P.spread(panel).rows == (
        ("rope", "", "1\n± 0.1", "2", "3"),
        ("nope", "16", "4", "5", "6\n± 0.2"),
    )
    first, second = P.split(panel, 2)
    assert first == P.Panel("t (64)", 2, ("encoding", "window", "64"),
                            (("rope", "", "1 ± 0.1"), ("nope", "16", "4")))  # fmt: skip
    assert second == P.Panel("t (128 to 256)", 2, ("encoding", "window", "128", "256"),
                             (("rope", "", "2", "3"), ("nope", "16", "5", "6 ± 0.2")))  # fmt: skip


def test_a_curve_too_wide_for_80_columns_reads_down_its_positions():
    """16 gold positions of 5 encodings: 250 columns wide as it is; in 80, turned, a row per
    gold position, each spread under its mean; in 40, split over tables; in 300, as is."""
    panel = _curve()
    (wide,) = P.fitted(panel, "gold position", 300)
    assert [c.header for c in wide.columns] == list(panel.header)
    (turned,) = P.fitted(panel, "gold position", 80)
    assert [c.header for c in turned.columns] == ["gold position", *(r[0] for r in panel.rows)]
    lines = P.render([turned], 80).splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    means = [line.split() for line in lines if line.split()[:1] in [[str(g)] for g in range(16)]]
    assert [m[0] for m in means] == [str(g) for g in range(16)]  # a row per gold position
    assert means[3][1:] == ["0.03"] * 5
    assert sum(line.split() == ["±", "0.015"] * 5 for line in lines) == 16
    narrow = P.fitted(panel, "gold position", 40)
    assert len(narrow) > 1
    text = P.render(narrow, 40)
    assert max(cell_len(line) for line in text.splitlines()) <= 40 and "…" not in text
    for g in range(16):  # each gold position's column in one of the tables, whole
        assert f"0.{g:02d} ± 0.015" in text


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
