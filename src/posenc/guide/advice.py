"""The guide's answers: :func:`guide` picks the situations a reader's needs select and
attaches an arena run's numbers to them; :func:`when_to_use` lists the situations that
recommend one encoding; :func:`find_run` finds the newest arena run under a directory, and
:func:`published_run` the standard preset's results that ship with posenc."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..registry import available
from .measured import evidence
from .situations import NEEDS, SITUATIONS, Situation

__all__ = ["PUBLISHED", "Advice", "find_run", "guide", "published_run", "when_to_use"]

#: where the standard preset's published results are: in the wheel (``pyproject.toml``
#: force-includes them), then in a source checkout (``docs/results/standard/``)
PUBLISHED = (
    Path(__file__).with_name("standard_results.json"),
    Path(__file__).resolve().parents[3] / "docs" / "results" / "standard" / "results.json",
)


@dataclass(frozen=True)
class Advice:
    """One situation of the guide and what an arena run measured about it (``()`` without
    a run, or when the run did not measure it)."""

    situation: Situation
    evidence: tuple[str, ...] = ()


def _check_needs(needs: Sequence[str]) -> list[str]:
    if isinstance(needs, str) or not all(isinstance(n, str) for n in needs):
        raise TypeError(f"needs: expected a sequence of need names, got {needs!r}")
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise ValueError(f"needs: unknown {unknown}; expected some of {list(NEEDS)}")
    return list(dict.fromkeys(needs))


def guide(needs: Sequence[str] = (), run: str | Path | None = None) -> list[Advice]:
    """The when-to-use guide: every situation, or with ``needs`` (keys of
    :data:`~posenc.guide.NEEDS`) the situations that share the most of them (so
    ``["extrapolation", "simple"]`` narrows to the one that has both, and ``["vision",
    "time-series"]`` gives one situation for each). With ``run`` (an arena run directory or
    its ``results.json``), each situation carries the run's numbers that bear on it.

    >>> [a.situation.recommend for a in guide(["extrapolation", "simple"])]
    [('alibi',)]
    >>> [a.situation.key for a in guide(["vision", "time-series"])]
    ['images', 'time-series']
    """
    wanted = _check_needs(needs)
    chosen = list(SITUATIONS)
    if wanted:
        shared = {s.key: len(set(s.needs) & set(wanted)) for s in SITUATIONS}
        most = max(shared.values())
        chosen = [s for s in SITUATIONS if most and shared[s.key] == most]
    if run is None:
        return [Advice(s) for s in chosen]
    from ..arena import read_measurements  # the arena's modules only when a run is read

    measured = read_measurements(run)
    return [Advice(s, evidence(measured, s)) for s in chosen]


def when_to_use(name: str) -> list[str]:
    """The situations (one line each, best first as the guide orders them) that recommend
    the registered encoding ``name``; ``[]`` when none does.

    >>> when_to_use("mrope")
    ['Video or images interleaved with text (multimodal)']
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected an encoding name (str), got {type(name).__name__}")
    if name not in available():
        raise ValueError(f"name: unknown encoding {name!r}; expected one of {available()}")
    return [s.question for s in SITUATIONS if name in s.recommend]


def find_run(root: str | Path = ".") -> Path | None:
    """The newest arena run under ``root``: the ``runs/arena-*`` directory whose
    ``results.json`` was written last, or None when there is none."""
    runs = [d for d in Path(root).glob("runs/arena-*") if (d / "results.json").is_file()]
    if not runs:
        return None
    return max(runs, key=lambda d: ((d / "results.json").stat().st_mtime_ns, d.name))


def published_run() -> Path | None:
    """The results of the standard arena preset published with posenc (a run of ``posenc
    arena run all --preset standard``, :data:`PUBLISHED`), or None where they are not
    installed. The guide reads them when no newer run is found."""
    return next((p for p in PUBLISHED if p.is_file()), None)
