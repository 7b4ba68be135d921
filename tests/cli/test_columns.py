"""Every ``posenc`` command's documented examples fit 80 columns with stdout not a terminal
(piped to a file: ``$COLUMNS`` unset), as they do in an 80-column pane (issue 55, item 10):
no line wider, but one that is a single word (a path, a URL) wider than 80 alone.

The commands that train or time (``arena run``, ``demo``, ``bench``) print here what they
print once done, from runs that are already finished: the published standard run
(``docs/results/``) and a stored benchmark result (``benchmarks/results/``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.cells import cell_len
from tests.cli.test_cli import command_paths
from typer.main import get_command

from posenc.arena.reporting.results import load_results
from posenc.cli import build_app, main

ROOT = Path(__file__).resolve().parents[2]
STANDARD = ROOT / "docs" / "results" / "standard"  # a finished run: every experiment
PLANS = ROOT / "docs" / "results" / "plans"
BENCH = ROOT / "benchmarks" / "results" / "2026-12-05-amd-epyc-small-issue54.json"
WIDTH = 80


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    """The lines of ``text`` wider than ``width``, but those that are one word."""
    return [line for line in text.splitlines() if cell_len(line) > width and len(line.split()) > 1]


@pytest.fixture
def llama(tmp_path):
    """Llama 3.1 8B's config.json, as the examples' ``./Llama-3.1-8B/config.json``."""
    config = json.loads((ROOT / "tests" / "data" / "hub" / "llama-3.1-8b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "num_hidden_layers": 32}))
    return path


@pytest.fixture
def off_a_terminal(monkeypatch):
    """stdout captured (not a terminal), ``$COLUMNS`` unset, no engine environments."""
    for name in ("COLUMNS", "POSENC_VLLM_PYTHON", "POSENC_LLAMA_CPP"):
        monkeypatch.delenv(name, raising=False)


def _finished_arena(results):
    """A stand-in for ``run_arena``: what a finished run prints, its tables."""
    from posenc.arena.reporting.panels import table

    def run_arena(*args, **kwargs):
        print(table(results), flush=True)

    return run_arena


EXAMPLES = [
    ["list"],
    ["list", "--wide"],
    ["info", "rope"],
    ["info", "alibi"],
    ["guide"],
    ["guide", "--need-extrapolation", "--simple"],
    ["guide", "--vision", "--run", str(STANDARD)],
    ["conform", "{llama}"],
    ["inspect", "{llama}"],
    ["inspect", "{llama}", "--target", "262144"],
    ["plot", "heatmap", "--encoding", "sinusoidal", "--dim", "128", "--out", "h.png"],
    ["plot", "rotation", "--out", "rotation.svg"],
    ["arena", "compare", str(STANDARD), str(PLANS)],
    ["arena", "run", "all", "--preset", "tiny"],  # the tables of a finished run
    ["demo", "--preset", "tiny", "--encodings", "rope", "alibi"],
    ["bench", "--size", "tiny", "--out", "benchmarks/results"],
]  # fmt: skip


@pytest.mark.parametrize("argv", EXAMPLES, ids=lambda argv: " ".join(argv[:3]))
@pytest.mark.usefixtures("off_a_terminal")
def test_each_example_fits_80_columns_off_a_terminal(argv, llama, tmp_path, monkeypatch, capsys):
    if argv[0] in ("conform", "inspect"):
        pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)  # the examples' relative paths: h.png, benchmarks/results
    argv = [a.format(llama=llama) for a in argv]
    if argv[:2] == ["arena", "run"] or argv[0] == "demo":  # no training: a finished run
        import posenc.arena

        monkeypatch.setattr(posenc.arena, "run_arena", _finished_arena(load_results(STANDARD)))
    if argv[0] == "bench":  # no timing: a stored result
        from posenc.bench import suite

        monkeypatch.setattr(suite, "run", lambda **kwargs: json.loads(BENCH.read_text()))
        monkeypatch.setattr(suite, "write", lambda result, out: Path(out) / BENCH.name)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.strip(), argv
    assert not too_wide(out), too_wide(out)
    assert "…" not in out  # wrapped, no cell cut


@pytest.mark.usefixtures("off_a_terminal")
def test_the_arena_tables_keep_every_number(capsys):
    """The lost-in-the-middle curves of the standard run, 16 and 32 gold positions of 5
    encodings, fit 80 columns turned (a row per gold position), each mean whole."""
    from posenc.arena.reporting.panels import panels, table

    results = load_results(STANDARD)
    text = table(results, "lost-in-the-middle")
    assert not too_wide(text)
    words = text.split()
    for panel in panels(results, "lost-in-the-middle"):
        assert panel.title in text
        for row in panel.rows:
            for cell in row[1:]:
                assert cell.split(" ± ")[0] in words  # the mean, on its row's line


@pytest.mark.usefixtures("off_a_terminal")
def test_columns_sets_the_width_off_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["list", "--wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert WIDTH < max(cell_len(line) for line in lines) <= 100  # wider, and no wider


@pytest.mark.usefixtures("off_a_terminal")
def test_every_help_fits_80_columns(capsys):
    for path in command_paths(get_command(build_app())):
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        assert not too_wide(out), (path, too_wide(out))


def test_a_layer_plan_of_hugging_face_fits_80_columns():
    """``posenc.hf.layer_plan(config)``: its repr and str (the rows were 150 columns)."""
    pytest.importorskip("transformers")
    from posenc.hf import layer_plan

    config = json.loads((ROOT / "tests" / "data" / "hub" / "llama-3.1-8b.json").read_text())
    plan = layer_plan({**config, "num_hidden_layers": 32})
    for text in (repr(plan), str(plan)):
        assert not too_wide(text), too_wide(text)
        assert len(text.splitlines()) >= 34  # still a row per layer: header, rule, 32
    assert "original_max_position_embeddings=8192" in str(plan)  # spelled out once


def test_a_long_path_alone_is_not_too_wide():
    word = "/" + "x" * 100
    assert too_wide(f"{word}\n  {word}") == []
    assert too_wide(f"report: {word}") == [f"report: {word}"]
