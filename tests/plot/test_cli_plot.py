"""posenc plot KIND: one subcommand per figure, its options from the figure's signature."""

import inspect
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import posenc.plot
from posenc.cli import main


def _error(err: str) -> str:
    """The last line of ``err``, after checking ``err`` is click's usage + one error line
    or one error line alone."""
    lines = err.splitlines()
    assert "Traceback" not in err and len(lines) in (1, 2), err
    assert len(lines) == 1 or lines[0].startswith("Usage: posenc plot")
    assert lines[-1].startswith("error: ")
    return lines[-1]


def test_plot_writes_the_articles_heatmap(tmp_path, capsys):
    out = tmp_path / "h.svg"
    argv = ["plot", "heatmap", "--encoding", "sinusoidal", "--dim", "16", "--positions", "5"]
    assert main([*argv, "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"<?xml")
    assert capsys.readouterr().out == f"wrote {out}\n"


def test_readme_commands_keep_working(tmp_path, capsys):
    argv = ["plot", "heatmap", "--encoding", "sinusoidal", "--dim", "128", "--positions", "50"]
    assert main([*argv, "--out", str(tmp_path / "heatmap.png")]) == 0
    assert main(["plot", "rotation", "--out", str(tmp_path / "rotation.png")]) == 0
    assert (tmp_path / "rotation.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("kind", list(posenc.plot.PLOTS))
def test_each_figure_help_shows_its_own_options(kind, capsys):
    assert main(["plot", kind, "--help"]) == 0
    out = capsys.readouterr().out
    taken = inspect.signature(posenc.plot.get(kind)).parameters
    flags = set(re.findall(r"^  (--[a-z0-9-]+)", out, re.M)) - {"--out", "--help"}
    assert flags <= {"--" + p.replace("_", "-") for p in taken}
    assert "--out FILE" in out and f"posenc plot {kind} " in out


def test_plot_rejects_an_option_the_figure_does_not_take(tmp_path, capsys):
    assert main(["plot", "rotation", "--length", "3", "--out", str(tmp_path / "r.png")]) == 2
    assert _error(capsys.readouterr().err) == "error: No such option: --length"
    assert not (tmp_path / "r.png").exists()


def test_plot_bad_values_are_one_line(tmp_path, capsys):
    assert main(["plot", "heatmap", "--encoding", "rope", "--out", str(tmp_path / "h.png")]) == 2
    assert "'rope' is a rotary encoding" in _error(capsys.readouterr().err)
    assert main(["plot", "heatmap", "--out", str(tmp_path / "h.pdf")]) == 2
    assert ".pdf" in _error(capsys.readouterr().err)
    assert main(["plot", "heatmap", "--dim", "many", "--out", str(tmp_path / "h.png")]) == 2
    assert "'--dim'" in _error(capsys.readouterr().err)
    assert main(["plot", "no-such-figure", "--out", str(tmp_path / "h.png")]) == 2
    assert "No such command 'no-such-figure'" in _error(capsys.readouterr().err)
    assert main(["plot", "heatmap"]) == 2
    assert "'--out'" in _error(capsys.readouterr().err)


def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["plot", "heatmap", "--out", str(tmp_path / "h.png")]) == 2
    assert "pip install 'posenc[plot]'" in _error(capsys.readouterr().err)


def fake(
    n: int = 3,
    scale: float = 1.0,
    label: str = "x",
    flag: bool = False,
    grid: tuple[int, int] = (2, 2),
    sizes: Sequence[int] = (1,),
    scalings: Sequence[Mapping[str, Any] | None] = (None,),
    where: str | Path | None = None,
    opaque: object = None,
) -> str:
    """A fake figure that returns its arguments.

    Args:
        n: a count.
        scale: a factor.

    Example: posenc plot fake --n 2 --out f.png
    """
    return "figure"


@pytest.fixture
def drawn(monkeypatch):
    """The keyword arguments that ``posenc plot fake`` passes to :func:`fake`."""
    calls = []

    def record(**kwargs):
        calls.append(kwargs)
        return "figure"

    record.__signature__ = inspect.signature(fake)
    record.__doc__ = fake.__doc__
    record.__module__ = __name__
    monkeypatch.setitem(posenc.plot.PLOTS, "fake", "fake")
    monkeypatch.setattr(posenc.plot, "get", lambda name: record)
    monkeypatch.setattr(posenc.plot, "save", lambda fig, path: Path(path))
    return calls


def test_options_are_built_from_the_signature(drawn, capsys):
    argv = ["plot", "fake", "--n", "5", "--flag", "--grid", "4", "6", "--sizes", "1", "-2", "3"]
    argv += ["--scalings", "none", '{"rope_type": "linear", "factor": 4}', "--where", "d"]
    assert main([*argv, "--out", "f.png"]) == 0
    assert capsys.readouterr().out == "wrote f.png\n"
    scalings = [None, {"rope_type": "linear", "factor": 4}]
    given = {"n": 5, "flag": True, "grid": (4, 6), "sizes": [1, -2, 3], "scalings": scalings}
    assert drawn == [{**given, "where": "d"}]


def test_options_not_given_keep_the_functions_defaults(drawn):
    assert main(["plot", "fake", "--out", "f.png"]) == 0
    assert drawn == [{}]


def test_fake_help_has_docs_defaults_and_the_docstring_example(drawn, capsys):
    assert main(["plot", "fake", "--help"]) == 0
    out = capsys.readouterr().out
    assert "A fake figure that returns its arguments." in out
    assert re.search(r"--n N\s+a count. \[default: 3\]", out)
    assert "--opaque" not in out  # a type no command line can give
    assert "posenc plot fake --n 2 --out f.png" in out


def test_a_bad_sequence_value_is_one_line(drawn, capsys):
    assert main(["plot", "fake", "--sizes", "1", "two", "--out", "f.png"]) == 2
    assert _error(capsys.readouterr().err) == "error: --sizes takes values of type int, got 'two'"
    assert drawn == []
