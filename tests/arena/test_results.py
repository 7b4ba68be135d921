"""posenc.arena.reporting.results and .records: records to results.json/CSV and back, and
their aggregation."""

from __future__ import annotations

import csv
import io
import json
import statistics
import subprocess
import sys

import pytest

from posenc.arena.reporting import records as RC
from posenc.arena.reporting import results as R


def _parse(cell: str) -> object:
    """A CSV cell back to the JSON value it was written from."""
    if cell == "":
        return None
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell


def test_import_needs_neither_matplotlib_nor_rich():
    code = (
        "import sys, posenc.arena.reporting.results, posenc.arena.reporting.panels, "
        "posenc.arena.reporting.figures, posenc.arena.reporting.summary, "
        "posenc.arena.reporting.report, posenc.arena.reporting.reading; "
        "print('matplotlib' in sys.modules, 'rich' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_make_results_adds_format_versions_machine(fake_results):
    made = R.make_results(
        fake_results["config"],
        fake_results["command"],
        fake_results["experiments"],
        fake_results["measurements"],
        fake_results["timings"],
    )
    assert made["format"] == R.FORMAT == 1
    assert set(made["versions"]) == {"posenc", "torch", "python", "numpy"}
    assert set(made["machine"]) == {"platform", "processor", "cpu_count", "torch_threads"}
    assert made["measurements"] == fake_results["measurements"]
    assert made["timings"] == fake_results["timings"]
    assert "seconds" not in json.dumps(made["measurements"])  # timings stay out of records


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"experiment": "nope"}, "unknown experiment"),
        ({"value": "5"}, "must be a number"),
        ({"value": None, "note": ""}, "needs a note"),
    ],
)
def test_make_results_rejects_bad_records(fake_results, change, match):
    record = {**fake_results["measurements"][0], **change}
    with pytest.raises(ValueError, match=match):
        R.make_results({}, [], ["extrapolation"], [record], {})


def test_make_results_rejects_unknown_experiment():
    with pytest.raises(ValueError, match="unknown experiment 'extrapolate'"):
        R.make_results({}, [], ["extrapolate"], [], {})


def test_write_and_load_round_trip(tmp_path, fake_results):
    R.write_results(tmp_path, fake_results)
    assert R.load_results(tmp_path) == fake_results
    assert R.load_results(tmp_path / "results.json") == fake_results
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    records = fake_results["measurements"]
    assert len(rows) == len(records)
    for row, record in zip(rows, records, strict=True):
        assert {k: _parse(v) for k, v in row.items() if v != ""} == {
            k: v for k, v in record.items() if v is not None
        }


def test_csv_header_base_keys_then_extras_sorted():
    records = [
        {"experiment": "extrapolation", "encoding": "a", "seed": 0, "train_length": 4,
         "eval_length": 8, "metric": "loss", "value": 0.1, "mode": "chunks"},
        {"experiment": "context-extension", "encoding": "b", "seed": 1, "train_length": 4,
         "eval_length": 8, "metric": "loss", "value": None, "note": "x", "factor": 2},
    ]  # fmt: skip
    text = R.to_csv(records)
    header, first, second = list(csv.reader(io.StringIO(text)))
    assert header == [*RC.BASE_FIELDS, "factor", "mode"]
    assert first == ["extrapolation", "a", "0", "4", "8", "loss", "0.1", "", "", "chunks"]
    assert second == ["context-extension", "b", "1", "4", "8", "loss", "", "x", "2", ""]


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path / "results.json")):
        R.load_results(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json.*invalid JSON"):
        R.load_results(bad)
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    with pytest.raises(ValueError, match=r"other\.json.*not an arena results file"):
        R.load_results(other)
    future = tmp_path / "future.json"
    future.write_text('{"format": 2, "measurements": []}')
    with pytest.raises(ValueError, match=r"future\.json.*format 2"):
        R.load_results(future)


def test_aggregate_by_hand(fake_results):
    rows = RC.aggregate(fake_results["measurements"])
    records = fake_results["measurements"]
    assert len(rows) == len(records) // 2  # two seeds each
    row = next(
        r
        for r in rows
        if r["experiment"] == "extrapolation"
        and r["encoding"] == "rope"
        and r["mode"] == "sliding"
        and r["eval_length"] == 512
    )
    values = [
        m["value"]
        for m in records
        if m["experiment"] == "extrapolation"
        and m["encoding"] == "rope"
        and m["mode"] == "sliding"
        and m["eval_length"] == 512
    ]
    assert len(values) == 2
    assert row["values"] == values
    assert row["seeds"] == [0, 1]
    assert row["n"] == 2
    assert row["mean"] == pytest.approx((values[0] + values[1]) / 2)
    assert row["std"] == pytest.approx(abs(values[0] - values[1]) / 2**0.5)  # sample std
    assert row["std"] == pytest.approx(statistics.stdev(values))
    for key in ("seed", "value"):
        assert key not in row


def test_aggregate_one_seed_and_cannot_run():
    base = {"experiment": "extrapolation", "encoding": "e", "train_length": 4, "eval_length": 8,
            "metric": "perplexity"}  # fmt: skip
    rows = RC.aggregate(
        [
            {**base, "seed": 0, "value": 3.0},
            {**base, "mode": "x", "seed": 0, "value": None, "note": "too long"},
            {**base, "mode": "x", "seed": 1, "value": None, "note": "too long"},
        ]
    )
    assert rows[0] == {**base, "mean": 3.0, "std": 0.0, "n": 1, "seeds": [0], "values": [3.0]}
    assert rows[1]["mean"] is None and rows[1]["std"] is None and rows[1]["n"] == 0
    assert rows[1]["note"] == "too long"
    assert rows[1]["values"] == [None, None]
