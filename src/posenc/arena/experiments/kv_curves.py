"""Key-value retrieval curves of a run, and how each bends (``lost-in-the-middle``'s report
and the guide read them here): accuracy by gold position per seed, the ends against the
middle judged against the seed spread (Liu et al. 2023, "Lost in the middle", arXiv:2307.03172,
saw a U in large models; a small one may show one side only).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..reporting.rows import Rows

__all__ = ["MIN_GAP", "Curve", "Shape", "kv_curves"]


@dataclass(frozen=True)
class Shape:
    """How a retrieval curve bends, judged against the seed spread.

    Attributes:
        name: ``"U"`` (both ends above the middle), ``"recency"`` (the last gold position
            above the first), ``"primacy"`` (the first above the last) or ``"flat"``; each
            gap must exceed the margin.
        first, middle, last: mean accuracy over seeds at the first gold position, over the
            middle half of them, and at the last.
        margin: the gap a difference must exceed: the larger of :data:`MIN_GAP` and the
            largest seed range (max - min over seeds) of the three.
    """

    name: str
    first: float
    middle: float
    last: float
    margin: float


#: the smallest accuracy gap read as a shape, whatever the seeds say (one seed has no spread)
MIN_GAP = 0.05


@dataclass(frozen=True)
class Curve:
    """One encoding's key-value retrieval in a run for one query placement (``mode``) and
    number of pairs: accuracy by gold position, per seed.

    Attributes:
        trained_pairs: the number of pairs it was trained with (the mode's fewest).
        by_seed: ``{seed: {gold position: accuracy}}`` over the seeds that ran.
        in_distribution: the encoding's mean accuracy at ``trained_pairs`` in this mode
            (this curve's own mean when it is that curve).
    """

    mode: str | None
    n_pairs: int
    encoding: str
    trained_pairs: int
    by_seed: dict[int, dict[int, float]]
    in_distribution: float | None = None

    @property
    def accuracy(self) -> dict[int, float]:
        """Mean accuracy over seeds by gold position."""
        golds = sorted(set.intersection(*(set(c) for c in self.by_seed.values())))
        return {g: statistics.fmean(c[g] for c in self.by_seed.values()) for g in golds}

    @property
    def mean(self) -> float:
        """The accuracy averaged over gold positions (and seeds)."""
        return statistics.fmean(self.accuracy.values())

    @property
    def spread(self) -> float:
        """The seed range (max - min over seeds) of the accuracy averaged over gold positions."""
        means = [statistics.fmean(c.values()) for c in self.by_seed.values()]
        return max(means) - min(means)

    @property
    def learned(self) -> bool:
        """Whether retrieval was learned, so the curve is one to read: mean accuracy at the
        trained number of pairs at least 1.5x that of answering a random value of the context
        (1 / trained_pairs). A model at chance there is not read at more pairs, where chance
        is lower still."""
        trained = self.mean if self.in_distribution is None else self.in_distribution
        return trained >= 1.5 / self.trained_pairs

    def ends(self) -> tuple[float, float, float]:
        """Mean accuracy at the first gold position, over the middle half, and at the last."""
        shape = self.shape()
        return shape.first, shape.middle, shape.last

    def shape(self) -> Shape:
        """The curve's :class:`Shape`: each end and the middle half per seed, then their
        means and the largest seed range as the margin."""
        golds = sorted(self.accuracy)
        first, last = golds[0], golds[-1]
        quarter = len(golds) / 4
        middle = [g for i, g in enumerate(golds) if quarter <= i < len(golds) - quarter]
        middle = middle or golds[len(golds) // 2 : len(golds) // 2 + 1]
        per_seed = [
            (c[first], statistics.fmean(c[g] for g in middle), c[last])
            for c in self.by_seed.values()
        ]
        a, m, z = (statistics.fmean(column) for column in zip(*per_seed, strict=True))
        ranges = [max(column) - min(column) for column in zip(*per_seed, strict=True)]
        margin = max(MIN_GAP, *ranges)
        if a - m > margin and z - m > margin:
            name = "U"
        elif z - a > margin:
            name = "recency"
        elif a - z > margin:
            name = "primacy"
        else:
            name = "flat"
        return Shape(name, a, m, z, margin)


def kv_curves(measured: Rows) -> tuple[list[Curve], str | None]:
    """A run's lost-in-the-middle curves (encodings with at least three gold positions that
    ran), query-last placement first, then by number of pairs; and their metric;
    ``([], None)`` without the experiment."""
    rows, metric = measured.metric()
    out = []
    for mode in sorted({r.get("mode") for r in rows}, key=str, reverse=True):
        here = [r for r in rows if r.get("mode") == mode]
        counts = sorted({r.get("n_pairs") or 0 for r in here})
        trained: dict[str, float] = {}  # encoding -> its mean at the trained pairs
        for n_pairs in counts:
            at = [r for r in here if (r.get("n_pairs") or 0) == n_pairs]
            for encoding in dict.fromkeys(r["encoding"] for r in at):
                by_seed: dict[int, dict[int, float]] = {}
                for r in at:
                    if r["encoding"] != encoding:
                        continue
                    for seed, value in zip(r["seeds"], r["values"], strict=True):
                        if value is not None:
                            by_seed.setdefault(seed, {})[r["gold_position"]] = float(value)
                if by_seed and min(len(c) for c in by_seed.values()) >= 3:
                    curve = Curve(
                        mode, n_pairs, encoding, counts[0], by_seed, trained.get(encoding)
                    )
                    trained.setdefault(encoding, curve.mean)
                    out.append(curve)
    return out, metric
