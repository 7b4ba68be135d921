"""Progress bars for training and evaluation, with tokens per second (rich).

One :class:`Progress` per run shows a bar per task while it runs; ``bars=False`` (tests)
draws none and ``echo=False`` (ranks other than 0) prints nothing. rich is part of the
``posenc[arena]`` extra.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

__all__ = ["Progress", "Task"]


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
    """A set of rich progress bars; a context manager.

    Args:
        bars: draw the bars (False: a bar does nothing).
        echo: print lines given to :meth:`print` (False: silent, as on ranks other than 0).
    """

    def __init__(self, bars: bool = True, echo: bool = True) -> None:
        self._rich: Any = None
        self._echo = echo
        if bars and echo:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=True,
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
            print(line, flush=True)
        else:
            self._rich.console.print(line, highlight=False, markup=False)
