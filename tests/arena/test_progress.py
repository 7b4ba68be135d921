"""posenc.arena.running.progress: the run's count of units done of total, its estimate of
the time left, its JSON records and its line in the terminal (in place on a terminal, a
line per unit elsewhere)."""

from __future__ import annotations

import json

import pytest
import rich.console

from posenc.arena.running import progress as progress_module
from posenc.arena.running.progress import Progress, UnitCount, duration


class _Clock:
    """A ``time.perf_counter`` that reads what the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(progress_module.time, "perf_counter", fake)
    return fake


def test_duration_reads_as_a_person_says_it() -> None:
    assert [duration(s) for s in (0, 45.4, 60, 485, 3599, 3720)] == [
        "0s",
        "45s",
        "1m 00s",
        "8m 05s",
        "59m 59s",
        "1h 02m",
    ]


def test_the_estimate_is_the_mean_computed_unit_times_the_units_left(clock: _Clock) -> None:
    count = UnitCount(10)
    assert count.left() is None  # nothing computed yet
    count.add(loaded=True)  # loaded from an earlier try: no time, no estimate
    assert (count.done, count.left()) == (1, None)
    assert count.line() == "arena: 1/10 units done, 0s elapsed, time left not known yet"
    clock.now += 60.0
    count.add(loaded=False)  # one unit computed in 60 s, 8 left
    assert count.left() == pytest.approx(480.0)
    assert count.line() == "arena: 2/10 units done, 1m 00s elapsed, about 8m 00s left"
    assert count.record(event="unit") == {
        "event": "unit",
        "done": 2,
        "total": 10,
        "elapsed_s": 60.0,
        "left_s": 480.0,
    }
    for _ in range(8):
        count.add(loaded=False)
    assert count.left() == 0.0
    assert count.line() == "arena: 10/10 units done in 1m 00s"


def test_records_count_units_done_of_total_and_end_at_total(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with Progress(bars=False, records=True) as progress:
        progress.print("== extrapolation")
        progress.start_units(3, run_dir="runs/x")
        for name, loaded in (("a", True), ("b", False), ("c", False)):
            progress.unit_done(name, loaded=loaded)
        progress.end_units(report="runs/x/report.html")
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]  # stdout: only records
    assert [(r["event"], r["done"], r["total"]) for r in records] == [
        ("start", 0, 3),
        ("unit", 1, 3),
        ("unit", 2, 3),
        ("unit", 3, 3),
        ("end", 3, 3),
    ]
    assert [r.get("unit") for r in records[1:4]] == ["a", "b", "c"]
    assert [r["loaded"] for r in records[1:4]] == [True, False, False]
    assert records[0]["run_dir"] == "runs/x" and records[-1]["left_s"] == 0.0
    assert err == "== extrapolation\n"  # the lines for a person go to stderr


def test_no_records_from_a_process_that_does_not_echo(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(bars=True, echo=False, records=True)
    progress.start_units(1)
    progress.unit_done("a", loaded=False)
    progress.end_units()
    assert capsys.readouterr() == ("", "")


def test_off_a_terminal_the_line_is_printed_once_per_unit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with Progress(bars=True) as progress:  # capsys: not a terminal
        progress.start_units(2)
        progress.unit_done("a", loaded=True)
        progress.unit_done("b", loaded=True)
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "arena: 1/2 units done, 0s elapsed, time left not known yet",
        "arena: 2/2 units done in 0s",
    ]


def test_without_bars_there_is_no_line(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress(bars=False) as progress:
        progress.start_units(1)
        progress.unit_done("a", loaded=False)
    assert capsys.readouterr() == ("", "")


def test_on_a_terminal_the_line_is_a_bar_updated_in_place(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clock: _Clock
) -> None:
    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    progress = Progress(bars=True)
    progress.start_units(4)
    clock.now += 30.0
    progress.unit_done("a", loaded=False)
    bar = progress._rich.tasks[0]  # the run's count: the first task, above the others
    assert (bar.description, bar.completed, bar.total) == ("arena units", 1, 4)
    assert bar.fields["left"] == "about 1m 30s"
    assert capsys.readouterr().err == ""  # not printed line by line
