"""posenc plot KIND: one subcommand per figure, its options from the figure's signature."""

import inspect
import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import posenc.plot
from posenc.cli import main
from posenc.cli.plot import FROM_A_RUN, figure_command


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
    draws = FROM_A_RUN.get(kind) or posenc.plot.get(kind)  # a run's model, or the figure
    taken = inspect.signature(draws).parameters
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


def test_a_bool_option_switches_both_ways(drawn, capsys):
    assert main(["plot", "fake", "--no-flag", "--out", "f.png"]) == 0
    assert main(["plot", "fake", "--flag", "--out", "f.png"]) == 0
    assert drawn == [{"flag": False}, {"flag": True}]
    assert main(["plot", "fake", "--help"]) == 0
    assert "--flag / --no-flag" in capsys.readouterr().out


def test_bias_causal_switch(tmp_path, capsys):
    out = str(tmp_path / "b.png")
    assert main(["plot", "bias", "--encoding", "alibi", "--no-causal", "--out", out]) == 0
    assert main(["plot", "bias", "--encoding", "kerple", "--causal", "--out", out]) == 0
    capsys.readouterr()
    assert main(["plot", "bias", "--encoding", "fox", "--no-causal", "--out", out]) == 2
    assert "keys at or before their query only" in _error(capsys.readouterr().err)


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


def _example_args(command) -> list[str]:
    """The arguments after ``posenc plot KIND`` of the example in ``command``'s help."""
    line = command.epilog.split("Example:")[1].strip().splitlines()[0]
    words = shlex.split(line)
    assert words[:3] == ["posenc", "plot", command.name], line
    return words[3:]


@pytest.mark.parametrize("kind", list(posenc.plot.PLOTS))
def test_each_figures_example_parses(kind):
    command = figure_command(kind)
    args = _example_args(command)
    ctx = command.make_context(kind, args)  # a UsageError if a required option is missing
    assert ctx.params["out"] == args[args.index("--out") + 1]


def test_attention_example_names_a_run():
    args = _example_args(figure_command("attention"))
    assert args[args.index("--run") + 1]


@pytest.mark.parametrize("kind", list(posenc.plot.PLOTS))
def test_each_figures_first_help_line_reads_well(kind):
    summary = figure_command(kind).help
    assert summary[0].isupper() and summary.endswith("."), summary
    assert "`" not in summary and ":func:" not in summary, summary
    words = summary.lower().split()
    assert all(a != b for a, b in itertools.pairwise(words)), summary  # not "Pair pair"


def test_a_parameter_in_the_first_line_shows_as_its_option():
    assert "One 2-D pair (--pair) of a vector" in figure_command("rotation").help
    assert "on --text," in figure_command("attention").help


@pytest.mark.parametrize("kind", list(posenc.plot.PLOTS))
def test_options_say_what_omitting_them_means(kind):
    for param in figure_command(kind).params:
        assert "when None" not in (param.help or ""), param.help
        assert "[default: none]" not in (param.help or ""), param.help


def test_frequencies_help_lists_the_named_scalings():
    from posenc.plot.frequencies import NAMED_SCALINGS

    (scalings,) = [p for p in figure_command("frequencies").params if p.name == "scalings"]
    assert "NAMED_SCALINGS" in scalings.help
    for name in NAMED_SCALINGS:
        assert re.search(rf"\b{name}\b", scalings.help.split("[default")[0]), name


def test_kind_errors_use_an_before_a_vowel(tmp_path, capsys):
    argv = ["plot", "bias", "--encoding", "sinusoidal", "--out", str(tmp_path / "b.png")]
    assert main(argv) == 2
    assert "'sinusoidal' is an additive encoding" in _error(capsys.readouterr().err)


def test_the_fallback_example_gives_required_options(monkeypatch):
    def needs(n: int, out_of: str, scale: float = 1.0) -> str:
        """A figure with required parameters and no example.

        Args:
            n: a count.
            out_of: a name.
            scale: a factor.
        """
        return "figure"

    monkeypatch.setitem(posenc.plot.PLOTS, "needs", "needs")
    monkeypatch.setattr(posenc.plot, "get", lambda name: needs)
    command = figure_command("needs")
    assert _example_args(command) == ["--n", "N", "--out-of", "TEXT", "--out", "needs.png"]
    assert "--scale" not in command.epilog
