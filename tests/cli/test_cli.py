"""posenc.cli: the ``posenc`` command on typer (list, info, demo, --version, help, errors)."""

import json
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
import torch
from typer.main import get_command

import posenc
from posenc import demo
from posenc.cli import build_app, main
from posenc.cli.encodings import EXAMPLE_HEADING
from posenc.terminal import memory_cost


def _rows(text: str) -> dict[str, list[str]]:
    """The table rows of ``text`` keyed by their first cell (cells: 2+ spaces apart)."""
    rows = {}
    for line in text.splitlines():
        cells = [c for c in re.split(r"\s{2,}", line.strip()) if c]
        if cells:
            rows.setdefault(cells[0], cells)
    return rows


def _one_error_line(err: str) -> str:
    """The error line of ``err``: one ``error:`` line, after at most click's usage line."""
    lines = err.splitlines()
    assert "Traceback" not in err
    assert len(lines) in (1, 2), err
    if len(lines) == 2:
        assert lines[0].startswith("Usage: posenc"), err
    assert lines[-1].startswith("error: "), err
    return lines[-1]


def test_list_shows_every_encoding(capsys):
    assert main(["list"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["name"] == [
        "name", "kind", "trainable", "relative", "extrapolates", "memory cost", "paper"
    ]  # fmt: skip
    for name in posenc.available():
        info = posenc.info(name)
        assert rows[name][:2] == [name, info.kind]
        assert rows[name][5:] == [memory_cost(name), info.reference]  # whole, not cut
    assert rows["learned"][2:5] == ["yes", "no", "no"]  # trainable, relative, extrapolates
    assert rows["alibi"][2:5] == ["no", "yes", "yes"]


def test_info_shows_fields_formula_config_and_paper(capsys):
    assert main(["info", "learned"]) == 0
    out = capsys.readouterr().out
    info = posenc.info("learned")
    assert out.startswith(f"learned: {info.summary}\n")
    rows = _rows(out)
    assert rows["kind"] == ["kind", "additive"]
    assert rows["paper"] == ["paper", info.reference]
    assert rows["extrapolates"] == ["extrapolates", "no"]
    assert rows["memory cost"] == ["memory cost", "[L, d] learned table"]
    for line in info.formula.splitlines():
        assert f"  {line}\n" in out
    assert rows["max_positions"][:3] == ["max_positions", "int", "2048"]
    assert rows["max_positions"][3].startswith("rows in the table")
    assert rows["init_std"][:3] == ["init_std", "float", "1.0"]
    assert rows["dim"][2].startswith("required")
    assert "\x1b[" not in out  # no colour codes when stdout is not a terminal


@pytest.mark.parametrize("name", posenc.available())
def test_info_example_runs_as_printed(name, capsys):
    assert main(["info", name]) == 0
    out = capsys.readouterr().out
    code = out.split(f"\n{EXAMPLE_HEADING}\n", 1)[1]
    assert "posenc.create" in code
    torch.manual_seed(0)
    exec(compile(code, f"<posenc info {name}>", "exec"), {})
    assert capsys.readouterr().out  # it printed what it computed


def test_info_unknown_name_is_one_line(capsys):
    assert main(["info", "no-such-encoding"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    with pytest.raises(ValueError) as excinfo:
        posenc.info("no-such-encoding")
    assert _one_error_line(captured.err) == f"error: {excinfo.value}"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["no-such-command"], "No such command 'no-such-command'"),
        (["list", "--wide"], "No such option: --wide"),
        (["info"], "Missing argument 'NAME'"),
        (["demo", "--seeds", "one"], "'--seeds'"),
    ],
)
def test_usage_errors_are_usage_and_one_line(argv, words, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert words in _one_error_line(captured.err)
    assert captured.out == ""


def test_no_command_shows_help_on_stderr(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Usage: posenc")
    assert "list" in err and "plot" in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"posenc {version('posenc')}\n"


def _paths(command, path=()):
    """Every command path of the app: (), ("list",), ("plot", "heatmap"), ..."""
    yield path
    if hasattr(command, "list_commands"):
        ctx = command.make_context("posenc", [], resilient_parsing=True)
        for name in command.list_commands(ctx):
            yield from _paths(command.get_command(ctx, name), (*path, name))


def test_every_command_has_help_with_an_example(capsys):
    paths = list(_paths(get_command(build_app())))
    expected = {("plot", kind) for kind in posenc.plot.PLOTS}
    expected |= {("list",), ("info",), ("demo",), ("bench",)}
    expected |= {("arena", c) for c in ("run", "report", "compare")}
    assert expected <= set(paths)
    for path in paths:
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        assert "Example" in out and "posenc " in out, path
        assert out.startswith(f"Usage: {' '.join(('posenc', *path))}"), path


def test_python_dash_m_posenc_runs_the_command():
    done = subprocess.run(
        [sys.executable, "-m", "posenc", "list"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert set(_rows(done.stdout)) >= set(posenc.available())
    done = subprocess.run(
        [sys.executable, "-m", "posenc", "info", "nothing"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert _one_error_line(done.stderr).startswith("error: unknown encoding 'nothing'")


def test_help_and_list_import_no_optional_extra():
    """Nor dynamo: importing it takes longer than the rest of ``import posenc``."""
    probe = (
        "import contextlib, io, sys\n"
        "from posenc.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes = [main(['--help']), main(['list']), main(['info', 'rope'])]\n"
        "extras = sorted(m for m in sys.modules if m in sys.argv[1:])\n"
        "print(codes, extras)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "matplotlib", "transformers", "torch._dynamo"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 0, 0] []"


def test_bench_refuses_a_bad_size_or_case_in_one_line(capsys, tmp_path):
    assert main(["bench", "--size", "huge", "--out", str(tmp_path)]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith("error: --size must be one of")
    assert main(["bench", "--cases", "rope,nothing", "--out", str(tmp_path)]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith("error: --cases must name")
    assert list(tmp_path.iterdir()) == []


def test_worked_example_is_exact(tol):
    # float32 token values plus sin 0 = 0 and cos 0 = 1 (exact), one rounding, against the
    # decimals rounded to float32: two roundings of values up to 1.14
    torch.testing.assert_close(
        demo.worked_example(0), torch.tensor([0.51, 0.78, 0.88, 1.14]), **tol(n=2, scale=1.14)
    )
    at_5 = demo.worked_example(5)
    expected = torch.tensor([0.51, -0.22, 0.88, 0.14]) + posenc.functional.sinusoidal(
        torch.tensor(5), 4
    )
    torch.testing.assert_close(at_5, expected)
    assert (at_5 - demo.worked_example(0)).abs().max() > 0.5


def test_demo_prints_the_example_then_runs_the_arena(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["demo", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "[ 0.51,  0.78,  0.88,  1.14]" in text
    assert set(_rows(text)) >= set(posenc.available())  # the encodings table
    assert "extrapolation: perplexity" in text
    assert f"report: {out / 'report.html'}" in text
    assert (out / "report.html").exists()


def test_demo_and_arena_train_any_registered_1d_encoding(capsys, tmp_path):
    """Every registered encoding of 1-D token positions joins the arena without a change."""
    from posenc.arena.running.context import NOT_FOR_TEXT

    names = [
        n
        for n in posenc.available()
        if posenc.registry.get(n).position_axes == 1 and n not in NOT_FOR_TEXT
    ]
    args = ["arena", "run", "extrapolation", "--preset", "tiny", "--no-progress"]
    # --encodings takes one or more names, as before (argparse's nargs="+")
    assert main([*args, "--encodings", *names, "--out", str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert {r["encoding"] for r in results["measurements"]} == set(names)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["nope", "rope_2d"], "'rope_2d' encodes image-grid coordinates"),
        (["nope", "calendar"], "'calendar' encodes unix timestamps"),
        (["nope", "no-such-encoding"], "unknown encoding 'no-such-encoding'"),
    ],
)
def test_demo_refuses_encodings_it_cannot_train(capsys, tmp_path, names, message):
    args = ["demo", "--preset", "tiny", "--out", str(tmp_path / "run"), "--encodings", *names]
    assert main(args) == 2
    assert message in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "run").exists()
