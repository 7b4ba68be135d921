"""The README's measured claims come from the published run (``docs/results/standard/``):
every number it quotes about extrapolation is recomputed here from ``results.json`` through
the arena's own reader, and its extrapolation table is the arena's rendering of that run,
so a new run or an edit that leaves the README behind fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.arena import read_measurements
from posenc.arena.reporting.panels import table

ROOT = Path(__file__).parents[1]
RUN = ROOT / "docs" / "results" / "standard"
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def text() -> str:
    """The README with its whitespace collapsed (claims wrap across lines)."""
    return " ".join(README.read_text().split())


@pytest.fixture(scope="module")
def run() -> dict:
    """Per encoding: ``(perplexity at L, at 16L, ratio)``, means over the seeds."""
    return {
        e.encoding: (e.at_train, e.at_longest, e.ratio)
        for e in read_measurements(RUN).extrapolations()
        if e.ratio is not None
    }


def test_the_extrapolation_table_is_the_runs():
    """Each row of the README's table is a row of the arena's table of the run."""
    results = read_measurements(RUN).results
    rendered = {line.strip() for line in table(results, "extrapolation").splitlines()}
    block = README.read_text().split("```\n  encoding           64 (L)", 1)[1].split("```", 1)[0]
    rows = [line.strip() for line in block.splitlines()[1:] if line.strip()]
    assert len(rows) == 10 and all(row in rendered for row in rows), rows


def test_the_extrapolation_claims_are_the_runs(text, run):
    def ratio(name: str, digits: str = ".2f") -> str:
        return f"×{format(run[name][2], digits)}"

    assert ratio("alibi") == ratio("kerple")  # said together
    claims = [
        f"ALiBi and KERPLE stay flat to 16L ({ratio('alibi')})",
        f"Shaw and FIRE nearly so ({ratio('shaw')}, {ratio('fire')})",
        f"NoPE within {ratio('nope')}",
        f"({ratio('rope', '.2g')} and {ratio('xpos', '.2g')} at 16L)",
        f"sinusoidal goes {ratio('sinusoidal', '.2g')}",
        f"KERPLE ({run['kerple'][1]:.2f}) is ahead of ALiBi ({run['alibi'][1]:.2f})",
        f"({run['rope'][0]:.2f} and {run['xpos'][0]:.2f}, not separated)",
        # the command-line section's guide bullet
        f"plain RoPE at {ratio('rope', '.2g')} its perplexity at 16L against ALiBi's "
        f"{ratio('alibi')}",
    ]
    missing = [claim for claim in claims if claim not in text]
    assert not missing, missing
