"""The runner of every benchmark: interleaved repetitions, medians and spreads.

The implementations of one case (the floor, posenc, the peers) are timed in the same
process and the same run, in turns: ``A B C, B C A, C A B, ...`` (each round's order
turned by one, so that each follows each of the others alike: a call runs on the caches
the one before it left), so a slow minute of the machine (another process, a frequency
change) falls on all of them alike instead of on whichever ran then. Each implementation
is called ``warmup`` times first (untimed: allocations, lazy initialisation, compilation),
then once per round for ``repeat`` rounds.

A result is the median of the rounds with the quartiles and the extremes as its spread;
the ratio to the floor divides medians from the same run (``x_floor``), and fastest rounds
(``x_floor_min``). On a shared machine whose interference only adds time, the fastest
round is the least disturbed one: the speed targets (:mod:`posenc.bench.targets`) read
the ratio of fastest rounds, which stays within a few hundredths where the ratio of
medians of a few rounds moves by tenths between runs of the same code.

Example:
    >>> ticks = iter(range(100))
    >>> order = []
    >>> impls = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    >>> stats = interleaved(impls, repeat=3, warmup=1, clock=lambda: float(next(ticks)))
    >>> "".join(order)  # one untimed warm-up round, then three timed ones
    'ababbaab'
    >>> stats["a"].median_s, stats["a"].n
    (1.0, 3)
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy
import torch

__all__ = ["Stats", "forward_call", "interleaved", "interleaved_rows", "row", "summarise"]


@dataclasses.dataclass(frozen=True)
class Stats:
    """Summary of the timed rounds of one implementation, in seconds.

    Attributes:
        median_s: the median round.
        q1_s, q3_s: the first and third quartiles (linear interpolation).
        min_s, max_s: the fastest and slowest rounds.
        n: the number of timed rounds.
    """

    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    max_s: float
    n: int

    def to_dict(self, floor: Stats | None = None) -> dict[str, Any]:
        """The record written to JSON, in milliseconds; ``x_floor`` is this median over
        ``floor``'s, ``x_floor_min`` this fastest round over ``floor``'s (None without a
        floor)."""
        out: dict[str, Any] = {
            "median_ms": self.median_s * 1e3,
            "q1_ms": self.q1_s * 1e3,
            "q3_ms": self.q3_s * 1e3,
            "min_ms": self.min_s * 1e3,
            "max_ms": self.max_s * 1e3,
            "n": self.n,
        }
        out["x_floor"] = self.median_s / floor.median_s if floor and floor.median_s > 0 else None
        out["x_floor_min"] = self.min_s / floor.min_s if floor and floor.min_s > 0 else None
        return out


def summarise(times: list[float]) -> Stats:
    """:class:`Stats` of a non-empty list of round times (seconds).

    >>> summarise([3.0, 1.0, 2.0, 10.0]).median_s
    2.5
    """
    if not times:
        raise ValueError("times must be non-empty")
    q1, q3 = numpy.quantile(times, [0.25, 0.75])  # linear interpolation
    return Stats(
        median_s=statistics.median(times),
        q1_s=float(q1),
        q3_s=float(q3),
        min_s=min(times),
        max_s=max(times),
        n=len(times),
    )


def interleaved(
    impls: Mapping[str, Callable[[], Any]],
    repeat: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
) -> dict[str, Stats]:
    """Time every callable of ``impls`` in turns and summarise each.

    Args:
        impls: name -> a callable with no arguments doing one repetition of the work.
        repeat: timed rounds (>= 1); each round calls every implementation once, round
            ``r`` in the order of ``impls`` turned by ``r`` (:func:`interleaved_rows`).
        warmup: untimed calls of each implementation before the first round (>= 0), in
            the same interleaved order.
        clock: seconds, monotonic (a fake one in tests).
        sync: called before reading the clock after each call (e.g. a device
            synchronisation); None on CPU, where calls return when done.

    Returns:
        name -> :class:`Stats`, in the order of ``impls``.
    """
    return interleaved_rows([impls], repeat, warmup, clock, sync)[0]


def interleaved_rows(
    rows: Sequence[Mapping[str, Callable[[], Any]]],
    repeat: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
) -> list[dict[str, Stats]]:
    """:func:`interleaved` over several rows at once, rounds outermost: round ``r`` times
    every implementation of every row before round ``r + 1`` starts, so a row's rounds are
    spread over the whole run instead of a few seconds of it. On a shared machine another
    tenant's busy spell lasts tens of seconds: timed row by row, it can cover every round
    of one row (whose fastest round then is no faster than its median); timed this way it
    falls on one or two rounds of each. Each row is warmed up ``warmup`` times first.

    >>> ticks = iter(range(100))
    >>> order = []
    >>> rows = [{n: (lambda n=n: order.append(n)) for n in names} for names in ("ab", "c")]
    >>> stats = interleaved_rows(rows, repeat=2, warmup=1, clock=lambda: float(next(ticks)))
    >>> "".join(order)  # the warm-ups, then two rounds of both rows, "ab" turned once
    'abcabcbac'
    >>> [sorted(s) for s in stats]
    [['a', 'b'], ['c']]

    Round ``r`` calls a row's implementations in their order turned by ``r``, so each
    follows each of the others equally often: a call right after another
    implementation's runs on the caches that one left (its code, its tensors), and in a
    fixed order the same one would always pay for them.
    """
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an int >= 1, got {repeat!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if not rows or not all(rows):
        raise ValueError("impls must name at least one implementation, in every row")
    for impls in rows:
        for _ in range(warmup):
            for fn in impls.values():
                fn()
    if sync is not None:
        sync()
    times: list[dict[str, list[float]]] = [{name: [] for name in impls} for impls in rows]
    for r in range(repeat):
        for impls, row_times in zip(rows, times, strict=True):
            turns = list(impls.items())
            turns = turns[r % len(turns) :] + turns[: r % len(turns)]
            for name, fn in turns:
                start = clock()
                fn()
                if sync is not None:
                    sync()
                row_times[name].append(clock() - start)
    return [{name: summarise(t) for name, t in row_times.items()} for row_times in times]


def row(
    config: Mapping[str, Any],
    stats: Mapping[str, Stats],
    floor: str | None,
    skipped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One configuration's record: its ``config``, the name of its ``floor``, each
    implementation's :meth:`Stats.to_dict` (ratios to the floor's median) and the skipped
    implementations with their reasons.

    >>> r = row({"L": 8}, {"floor": summarise([1.0]), "x": summarise([3.0])}, "floor")
    >>> r["results"]["x"]["x_floor"]
    3.0
    """
    base = stats.get(floor) if floor is not None else None
    return {
        "config": dict(config),
        "floor": floor,
        "results": {name: s.to_dict(base) for name, s in stats.items()},
        "skipped": dict(skipped or {}),
    }


def forward_call(
    fn: Callable[..., Any],
    inputs: tuple[torch.Tensor, ...],
    grads: tuple[torch.Tensor, ...] | None = None,
) -> Callable[[], Any]:
    """A no-argument call of ``fn(*inputs)`` to time: the forward under ``no_grad`` when
    ``grads`` is None, else the forward from leaves that require grad and the backward of
    its outputs (one tensor, or a tuple) with ``grads``, as training runs it: down to the
    inputs and to every parameter ``fn`` uses that requires grad (an encoding's MLP, its
    buckets). The inputs' gradients are cleared after each call; the parameters'
    accumulate (an addition of their own size)."""
    if grads is None:

        def forward() -> Any:
            with torch.no_grad():
                return fn(*inputs)

        return forward
    leaves = tuple(t.detach().requires_grad_(True) for t in inputs)

    def forward_backward() -> Any:
        out = fn(*leaves)
        torch.autograd.backward(out if isinstance(out, tuple) else (out,), grads)
        for leaf in leaves:
            leaf.grad = None

    return forward_backward
