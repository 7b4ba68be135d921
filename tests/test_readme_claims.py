"""The measured claims of the README and of the arena's page come from the published run
(``docs/results/standard/``): every number they quote about extrapolation is recomputed here
from ``results.json`` through the arena's own reader, and the page's tables are the arena's
rendering of that run, so a new run or an edit that leaves either behind fails. The README's
shape is held here too: short, the quick start on its first screen, a link to every page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posenc.arena import read_measurements
from posenc.arena.reporting.panels import table

ROOT = Path(__file__).parents[1]
RUN = ROOT / "docs" / "results" / "standard"
README = ROOT / "README.md"
ARENA = ROOT / "docs" / "arena.md"
COMMAND = ROOT / "docs" / "command.md"


def collapsed(path: Path) -> str:
    """``path``'s text with its whitespace collapsed (claims wrap across lines)."""
    return " ".join(path.read_text().split())


@pytest.fixture(scope="module")
def text() -> str:
    """The arena page, where the run's tables and what it says are."""
    return collapsed(ARENA)


@pytest.fixture(scope="module")
def run() -> dict:
    """Per encoding: ``(perplexity at L, at 16L, ratio)``, means over the seeds."""
    return {
        e.encoding: (e.at_train, e.at_longest, e.ratio)
        for e in read_measurements(RUN).extrapolations()
        if e.ratio is not None
    }


def test_the_extrapolation_table_is_the_runs():
    """Each row of the page's table is a row of the arena's table of the run."""
    results = read_measurements(RUN).results
    rendered = {line.strip() for line in table(results, "extrapolation", 140).splitlines()}
    block = ARENA.read_text().split("```\n  encoding           64 (L)", 1)[1].split("```", 1)[0]
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
    ]
    missing = [claim for claim in claims if claim not in text]
    assert not missing, missing
    # the README restates the first of them, and the guide's reading is in the README and
    # on the command's page
    guide = f"plain RoPE at {ratio('rope', '.2g')} its perplexity at 16L against ALiBi's " + (
        ratio("alibi")
    )
    readme = [claims[0], claims[1], claims[2], claims[3], claims[4], guide]
    missing = [claim for claim in readme if claim not in collapsed(README)]
    assert not missing, missing
    assert guide in collapsed(COMMAND)


#: the page's other measured claims, each beside the phrase of the run's own "what this
#: run says" (:func:`~posenc.arena.reporting.summary.summary`, computed from its numbers)
#: that it restates: a new published run changes the second, and the pair fails
RESTATED = [
    (
        "NTK-aware scaling takes RoPE's zero-shot perplexity from 10.4 to 6.97 (dynamic NTK "
        "7.00, not separated)",
        "Context extension ×4: best zero-shot ntk (6.97), not separated at this budget from "
        "dynamic (7) (perplexity vs 10.4 with none",
    ),
    (
        "at 8L dynamic NTK from 14.5 to 8.45",
        "Context extension ×8: best zero-shot dynamic (8.45), not separated at this budget "
        "from yarn (8.81) (perplexity vs 14.5 with none",
    ),
    ("is flat to 16L (5.44 → 5.30)", "rope-local-nope-global 5.44 at L=64, 5.3 at 1024"),
    ("go from 5.5 to 15.2", "rope 5.5 at L=64, 15.2 at 1024"),
    (
        "(×1.24 the median of the others at L)",
        "vs 6.7 for the other encodings (median of 2; ×1.24)",
    ),
    ("(×1.9 as a bidirectional masked LM)", "(median of 2; ×1.9)"),
    (
        "at 32 pairs, slopes from first to last (first 0.67, middle 0.62, last 0.22)",
        "rope primacy (first above last): first 0.67, middle 0.62, last 0.22",
    ),
]


@pytest.mark.parametrize(("readme", "run_says"), RESTATED)
def test_the_other_claims_restate_the_runs_summary(text, readme, run_says):
    from posenc.arena.reporting.summary import summary

    said = " ".join(summary(read_measurements(RUN).results))
    assert readme in text
    assert run_says in said


def test_the_retrieval_table_is_the_runs():
    """The page's retrieval means at 8 pairs, query-last: the arena's table's means over
    gold positions, each within the rounding of its two decimals."""
    rows, _ = read_measurements(RUN).rows("lost-in-the-middle")
    block = ARENA.read_text().split("```\n  encoding     mode          8 pairs", 1)[1]
    lines = [line.split() for line in block.split("```", 1)[0].splitlines()[1:] if line.strip()]
    assert len(lines) == 7
    for name, mode, mean, *_ in lines:
        here = [
            r["mean"]
            for r in rows
            if r["encoding"] == name and r["mode"] == mode and r["n_pairs"] == 8
        ]
        assert here, (name, mode)
        assert abs(sum(here) / len(here) - float(mean)) <= 0.005 + 1e-9, (name, mode, mean)


#: the README is the first screen of the project: at most this many lines
README_LINES = 250


def test_the_readme_is_short_and_starts_with_the_quick_start():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_LINES, len(lines)
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:2] == ["## Two commands", "## Quick start"], headings
    assert lines.index("## Quick start") < 40  # on the first screen


def test_the_readme_links_every_docs_page_and_every_link_resolves():
    readme = README.read_text()
    links = set(re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme))
    missing = sorted(link for link in links if not (ROOT / link).exists())
    assert not missing, missing
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert pages - links == set(), pages - links
    # what a new user looks for first
    for name in ("posenc.KVCache", "posenc.attention", "posenc.hf.apply", "extend_context"):
        assert name in readme, name
