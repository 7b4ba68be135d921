"""The speed targets a suite run is read against: a bound on one implementation's ratio to
its row's floor, for the rows a target names, met or not met.

Every ratio is measured in one process, so a target holds on a machine or it does not,
whatever that machine's absolute speed; the Markdown report states each target under its
table (:func:`verdicts`), and ``scripts/bench_isas.py`` puts the verdicts of several vector
ISAs side by side. The bounds are those of the project's speed work (forward+backward
including the gradients of the encoding's own parameters, as training computes them), and
of a call's host time (issue 53; the ``host`` case, whose floor is the peer doing the same
work: ``enc(q, k)`` at most half of transformers' rotation, ``posenc.attention`` at most 10x
a bare SDPA call, 25x with a bias, a model's forward and decode step at most 0.7x Hugging
Face Llama's).

A target reads the ratio of the fastest rounds (``x_floor_min``), the median ratio
(``x_floor``) beside it. On the 2-core VMs the project is measured on, interference from
other tenants only adds time and comes in bursts: windows of 5 interleaved rounds of T5's
forward under AVX2, all from one process and one code, gave medians' ratios from 1.10x to
1.46x and fastest rounds' from 1.07x to 1.19x. A verdict on the medians of one short run
said more about the neighbours than about the code.

Example:
    >>> from posenc.bench.timing import row, summarise
    >>> r = row({"encoding": "alibi", "L": 1024, "pass": "fwd"},
    ...         {"floor": summarise([1.0]), "posenc": summarise([1.2])}, "floor")
    >>> [v.line() for v in verdicts("bias", [r])]
    ['alibi fwd, L 1024: 1.20x (median 1.20x), target at most 1.30x: met']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TARGETS", "Target", "Verdict", "verdicts"]


@dataclass(frozen=True)
class Target:
    """At most ``bound`` times the floor for ``implementation`` in the rows of ``case`` whose
    configuration has every key of ``where`` at one of its values.

    Attributes:
        case: the suite case (``bias``, ``training``, ``host``).
        where: configuration key -> the values a row may have (e.g. ``{"encoding":
            ("t5", "kerple")}``).
        bound: the largest ratio to the row's floor that meets it.
        implementation: the result column read (``posenc`` in the bias case; the
            encoding's name in the training case, whose floor is ``nope``).
    """

    case: str
    where: Mapping[str, tuple[Any, ...]]
    bound: float
    implementation: str = "posenc"

    def applies(self, case: str, config: Mapping[str, Any]) -> bool:
        return case == self.case and all(config.get(k) in v for k, v in self.where.items())


@dataclass(frozen=True)
class Verdict:
    """A target read on one row: the ratio of the fastest rounds (None: the implementation
    did not run) and, shown beside it, the ratio of the medians."""

    target: Target
    config: Mapping[str, Any]
    ratio: float | None
    median: float | None = None

    @property
    def met(self) -> bool:
        return self.ratio is not None and self.ratio <= self.target.bound

    def label(self) -> str:
        """The row, in a few words: ``alibi fwd, L 1024``."""
        c = self.config
        if self.target.case == "training":
            return f"{self.target.implementation} training step, length {c.get('length')}"
        if self.target.case == "host":
            return f"{c.get('call')}, {c.get('encoding')}"
        return f"{c.get('encoding')} {c.get('pass')}, L {c.get('L')}"

    def measured(self) -> str:
        """``1.20x (median 1.25x)``, or ``not run``."""
        if self.ratio is None:
            return "not run"
        median = "" if self.median is None else f" (median {self.median:.2f}x)"
        return f"{self.ratio:.2f}x{median}"

    def status(self) -> str:
        return "met" if self.met else "not met"

    def line(self) -> str:
        bound = self.target.bound
        return f"{self.label()}: {self.measured()}, target at most {bound:.2f}x: {self.status()}"


FWD, BOTH = ("fwd",), ("fwd+bwd",)
TARGETS: tuple[Target, ...] = (
    Target("bias", {"encoding": ("alibi",), "pass": FWD}, 1.3),
    Target("bias", {"encoding": ("alibi",), "pass": BOTH}, 1.5),
    Target("bias", {"encoding": ("t5", "kerple", "shaw"), "pass": FWD}, 1.5),
    Target("bias", {"encoding": ("t5", "kerple", "shaw"), "pass": BOTH}, 1.6),
    Target("bias", {"encoding": ("fire",), "pass": FWD}, 2.0),
    Target("bias", {"encoding": ("fire",), "pass": BOTH}, 2.5),
    Target("training", {}, 1.2, implementation="alibi"),
    # host time per call against the peer (issue 53), with validation on
    Target("host", {"call": ("enc(q, k)",)}, 0.5),
    Target("host", {"call": ("attention",)}, 10.0),
    Target("host", {"call": ("attention, bias",)}, 25.0),
    Target("host", {"call": ("forward, 1 token", "decode step")}, 0.7),
)


def verdicts(
    case: str, records: Sequence[Mapping[str, Any]], targets: Sequence[Target] = TARGETS
) -> list[Verdict]:
    """Every target that applies to a row of ``case``, read on that row."""
    out = []
    for r in records:
        for t in targets:
            if t.applies(case, r["config"]):
                result = r["results"].get(t.implementation) or {}
                # a result written before fastest rounds were compared has the median only
                median = result.get("x_floor")
                out.append(Verdict(t, r["config"], result.get("x_floor_min", median), median))
    return out
