"""Progress for a run: a bar per task with tokens per second, and the run's own count of
units done of total, with the time elapsed and an estimate of the time left (rich).

One :class:`Progress` per run shows a bar per task while it runs; ``bars=False`` (tests,
``--no-progress``) draws none and ``echo=False`` (ranks other than 0) prints nothing. The
run's count (:meth:`Progress.start_units`, :meth:`Progress.unit_done`) is one line updated
in place above the bars on a terminal, else a line per unit on stderr (a log of ``make demo
| tee`` shows the run moving); with ``records=True`` (``--json``) it is also a JSON object
per line on stdout, and every line for a person goes to stderr. rich is part of the
``posenc[arena]`` extra.
"""

from __future__ import annotations

import json
import sys
import time
from types import TracebackType
from typing import Any

__all__ = ["Progress", "Task", "UnitCount", "duration"]


def duration(seconds: float) -> str:
    """``seconds`` as a person reads it: ``45s``, ``8m 05s``, ``1h 02m``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


class UnitCount:
    """The units of a run done of its total, the time since the count started and an
    estimate of the time left: the mean time of the units computed so far times the units
    left (units loaded from an earlier try of the run take no time and do not count in
    the mean; before the first computed unit there is no estimate).

    Args:
        total: the units the run holds (``>= 0``).
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.computed = 0
        self._start = time.perf_counter()

    def add(self, loaded: bool) -> None:
        """Count one more unit done: ``loaded`` from an earlier try, or computed now."""
        self.done += 1
        self.computed += not loaded

    def elapsed(self) -> float:
        """Seconds since the count started."""
        return time.perf_counter() - self._start

    def left(self) -> float | None:
        """The estimated seconds left, or None before the first computed unit."""
        if self.done >= self.total:
            return 0.0
        if self.computed == 0:
            return None
        return self.elapsed() / self.computed * (self.total - self.done)

    def record(self, **fields: Any) -> dict[str, Any]:
        """The count as a JSON progress record (``done``, ``total``, ``elapsed_s``,
        ``left_s``), with ``fields`` first."""
        left = self.left()
        return {
            **fields,
            "done": self.done,
            "total": self.total,
            "elapsed_s": round(self.elapsed(), 1),
            "left_s": None if left is None else round(left, 1),
        }

    def line(self) -> str:
        """``arena: 3/42 units done, 1m 10s elapsed, about 8m 05s left`` (at the end:
        ``arena: 42/42 units done in 9m 15s``)."""
        left = self.left()
        if self.done >= self.total:
            return f"arena: {self.done}/{self.total} units done in {duration(self.elapsed())}"
        estimate = "time left not known yet" if left is None else f"about {duration(left)} left"
        return (
            f"arena: {self.done}/{self.total} units done, "
            f"{duration(self.elapsed())} elapsed, {estimate}"
        )

    def left_text(self) -> str:
        """The estimate alone, for the bar (``about 8m 05s`` or ``-``)."""
        left = self.left()
        return "-" if left is None else f"about {duration(left)}"


class Task:
    """One bar: ``advance(steps, tokens)`` moves it and updates its tokens/s."""

    def __init__(self, progress: Any, task_id: Any) -> None:
        self._progress, self._id = progress, task_id
        self._tokens = 0
        self._start = time.perf_counter()

    def advance(self, steps: int = 1, tokens: int = 0, **fields: Any) -> None:
        """Move by ``steps``; ``tokens`` processed since the last call; other fields shown."""
        self._tokens += tokens
        if self._progress is None:
            return
        rate = self._tokens / max(time.perf_counter() - self._start, 1e-9)
        self._progress.update(self._id, advance=steps, rate=f"{rate:,.0f} tok/s", **fields)

    def close(self) -> None:
        """Remove the bar (a finished task is reported by its caller)."""
        if self._progress is not None:
            self._progress.remove_task(self._id)


class Progress:
    """A set of rich progress bars and the run's count of units; a context manager.

    Args:
        bars: draw the bars and the count's line (False: a bar does nothing, no line).
        echo: print lines given to :meth:`print` (False: silent, as on ranks other than 0).
        records: write the count as JSON records, one per line, on stdout (``--json``);
            every line for a person then goes to stderr.
    """

    def __init__(self, bars: bool = True, echo: bool = True, records: bool = False) -> None:
        self._rich: Any = None
        self._echo = echo
        self._bars = bars and echo
        self._records = records and echo
        self._to_stderr = records  # the lines for a person
        self._count: UnitCount | None = None
        self._count_id: Any = None
        if self._bars:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            class TimeLeft(TimeRemainingColumn):
                """rich's estimate, or the run count's own where a task has one (rich's
                needs several steps in its last 30 s: a unit takes minutes)."""

                def render(self, task: Any) -> Any:
                    from rich.text import Text

                    if "left" in task.fields:
                        return Text(task.fields["left"], style="progress.remaining")
                    return super().render(task)

            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeLeft(),
                console=Console(stderr=records),
                transient=True,
                redirect_stdout=not records,  # stdout holds the records: not redirected
            )

    def __enter__(self) -> Progress:
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich is not None:
            self._rich.stop()

    def task(self, description: str, total: int, completed: int = 0) -> Task:
        """A new bar of ``total`` steps, ``completed`` of them already done (a resumed run)."""
        if self._rich is None:
            return Task(None, None)
        task_id = self._rich.add_task(
            description, total=total, completed=completed, rate="", info=""
        )
        return Task(self._rich, task_id)

    def print(self, line: str) -> None:
        """Print ``line`` above the bars (plain print without bars)."""
        if not self._echo:
            return
        if self._rich is None:
            print(line, file=sys.stderr if self._to_stderr else sys.stdout, flush=True)
        else:
            self._rich.console.print(line, highlight=False, markup=False)

    # -- the run's count of units ---------------------------------------------------------

    def _in_place(self) -> bool:
        """The count is a line updated in place: bars drawn on a terminal."""
        return self._rich is not None and self._rich.console.is_terminal

    def _record(self, record: dict[str, Any]) -> None:
        if self._records:
            print(json.dumps(record), file=sys.stdout, flush=True)

    def start_units(self, total: int, **fields: Any) -> None:
        """Start the run's count of ``total`` units (a ``start`` record with ``fields``)."""
        self._count = UnitCount(total)
        self._record(self._count.record(event="start", **fields))
        if self._in_place():
            self._count_id = self._rich.add_task(
                "arena units", total=total, rate="", info="", left=self._count.left_text()
            )

    def unit_done(self, name: str, loaded: bool) -> None:
        """Count unit ``name`` as done (``loaded`` from an earlier try, or computed): a
        ``unit`` record, and the line moved in place or printed on stderr."""
        count = self._count
        if count is None:
            return
        count.add(loaded)
        self._record(count.record(event="unit", unit=name, loaded=loaded))
        if self._count_id is not None:
            self._rich.update(self._count_id, completed=count.done, left=count.left_text())
        elif self._bars:
            print(count.line(), file=sys.stderr, flush=True)

    def end_units(self, **fields: Any) -> None:
        """End the count: an ``end`` record with ``fields`` (the report's path ...)."""
        if self._count is not None:
            self._record(self._count.record(event="end", **fields))
