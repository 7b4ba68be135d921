"""posenc.cli: the ``posenc`` command on typer (list, info, demo, --version, help, errors)."""

import io
import json
import re
import subprocess
import sys
from importlib.metadata import version
from unittest.mock import patch

import pytest
import torch
from rich.cells import cell_len
from typer.main import get_command

import posenc
from posenc import demo, describe
from posenc.arena.experiments.extrapolation import EXTRAPOLATES
from posenc.attn import planner
from posenc.attn.planner import AttnShape
from posenc.cli import build_app, main
from posenc.cli.encodings import EXAMPLE_HEADING, extrapolations
from posenc.positions import AttnPositions
from posenc.terminal import (
    LENGTH,
    RUNS_PAST,
    encodings_table,
    memory_cost,
    memory_lines,
    yes_no,
)


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


def test_list_shows_every_encoding(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # a row per line to read back (80: _fits below)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    header = [c.header for c in encodings_table().columns]
    assert header == ["name", "kind", "trainable", "relative", RUNS_PAST, "memory cost"]
    for name in posenc.available():
        info = posenc.info(name)
        flags = [yes_no(info.trainable), yes_no(info.relative), yes_no(info.extrapolates)]
        assert rows[name] == [name, info.kind, *flags, memory_cost(name)]  # whole, not cut
    assert rows["learned"][2:5] == ["yes", "no", "no"]  # trainable, relative, runs past L
    assert rows["alibi"][2:5] == ["no", "yes", "yes"]
    assert "extrapolates" not in out  # the arena's word, for what it measures


def test_list_wide_adds_the_measured_extrapolation_and_the_paper(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # a row per line to read back (80: _fits below)
    assert main(["list", "--wide"]) == 0
    out = capsys.readouterr().out
    listed, papers, note = out.split("\n\n")  # the list, then a table of the rest, the note
    rows, extra = _rows(listed), _rows(papers)
    found = extrapolations()
    assert {"rope", "alibi", "learned"} <= set(found)  # the published standard run
    for name in posenc.available():
        assert rows[name][-1] == memory_cost(name)
        assert extra[name][-1] == posenc.info(name).reference
    # "runs past training length" and "extrapolates" are two things: RoPE runs past L,
    # and its perplexity at 16L is more than the arena's ×1.25 of that at L
    rope = found["rope"]
    assert rope.at_longest / rope.at_train > EXTRAPOLATES
    assert (rows["rope"][4], extra["rope"][1]) == ("yes", f"×{rope.ratio:.3g} (no)")
    alibi = found["alibi"]
    assert alibi.at_longest / alibi.at_train <= EXTRAPOLATES
    assert (rows["alibi"][4], extra["alibi"][1]) == ("yes", f"×{alibi.ratio:.3g} (yes)")
    learned = ("no", f"stops at {found['learned'].train_length}")
    assert (rows["learned"][4], extra["learned"][1]) == learned
    assert "yes: ≤ ×1.25, the arena's bar for extrapolates" in " ".join(note.split())


def test_info_shows_fields_formula_config_and_paper(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # a row per line to read back (80: _fits below)
    assert main(["info", "learned"]) == 0
    out = capsys.readouterr().out
    info = posenc.info("learned")
    assert out.startswith(f"learned: {info.summary}\n")
    rows = _rows(out)
    assert rows["kind"] == ["kind", "additive"]
    assert rows["paper"] == ["paper", info.reference]
    assert rows[RUNS_PAST] == [RUNS_PAST, "no"]
    assert rows["memory cost"] == ["memory cost", "[L, d] learned table"]
    for line in info.formula.splitlines():
        assert f"  {line}\n" in out
    assert rows["max_positions"][:3] == ["max_positions", "int", "2048"]
    assert rows["max_positions"][3].startswith("rows in the table")
    assert rows["init_std"][:3] == ["init_std", "float", "1.0"]
    assert rows["dim"][2].startswith("required")
    assert "\x1b[" not in out  # no colour codes when stdout is not a terminal


def test_info_shows_the_measured_extrapolation_apart_from_the_flag(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # a row per line to read back (80: _fits below)
    assert main(["info", "rope"]) == 0
    rows = _rows(capsys.readouterr().out)
    rope = extrapolations()["rope"]
    assert rows[RUNS_PAST] == [RUNS_PAST, "yes"]
    measured = rows["extrapolation"][1]
    times, lengths = rope.longest // rope.train_length, f"{rope.train_length} → {rope.longest}"
    assert measured.startswith(
        f"perplexity ×{rope.ratio:.3g} from the training length to {times} times it ({lengths}"
    )
    assert measured.endswith(": does not extrapolate (the arena's bar: ≤ ×1.25)")
    assert main(["info", "alibi"]) == 0
    assert ": extrapolates (the arena's bar" in _rows(capsys.readouterr().out)["extrapolation"][1]
    assert main(["info", "rope_2d"]) == 0  # not trained in the published run
    assert _rows(capsys.readouterr().out)["extrapolation"][1] == "not in the published arena run"


class _Terminal(io.StringIO):
    """A stdout that says it is a terminal: rich wraps to ``COLUMNS`` and adds colour."""

    def isatty(self) -> bool:
        return True


def _on_terminal(argv, monkeypatch, columns=80):
    """``posenc *argv`` as a terminal ``columns`` wide shows it, colour codes removed."""
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(argv) == 0
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())


def _fits(text, columns=80):
    assert "…" not in text  # no cell cut
    wide = [line for line in text.splitlines() if cell_len(line) > columns]
    assert not wide, wide


def test_list_fits_80_columns_with_every_name_whole(monkeypatch):
    text = _on_terminal(["list"], monkeypatch)
    _fits(text)
    firsts = [line.split()[0] for line in text.splitlines() if line[:1].strip()]
    assert [n for n in firsts if n in posenc.available()] == posenc.available()  # whole
    flat = " ".join(text.split())
    for name in posenc.available():  # each row's cells, wrapped but whole, in order
        info = posenc.info(name)
        flags = [yes_no(info.trainable), yes_no(info.relative), yes_no(info.extrapolates)]
        row = next(line for line in text.splitlines() if line.split()[:1] == [name])
        assert row.split()[1:5] == [info.kind, *flags], row
        assert " ".join(memory_cost(name).split()) in flat  # wrapped, not cut
    assert "runs past training length" in flat  # the header, wrapped


@pytest.mark.parametrize("name", ["rope", "t5", "learned_2d", "fox"])
def test_info_fits_80_columns(name, monkeypatch):
    text = _on_terminal(["info", name], monkeypatch)
    _fits(text)
    flat = " ".join(text.split())
    for key in describe.config_keys(name):  # every key whole, its meaning wrapped, not cut
        assert re.search(rf"^ {re.escape(key.name)} ", text, re.M), key.name
        assert " ".join(key.meaning.split()) in flat, key.name
    for line in posenc.info(name).formula.splitlines():
        assert " ".join(line.split()) in flat
    for line in memory_lines(name):
        assert " ".join(line.split()) in flat


def test_info_keeps_the_config_table_where_the_meaning_has_room(monkeypatch):
    text = _on_terminal(["info", "rope"], monkeypatch, columns=160)
    _fits(text, 160)
    assert re.search(r"^ key +type +default +meaning", text, re.M)
    assert re.search(r"^ base +float \| None +None +the wavelength base", text, re.M)


def _runner_plans(name):
    """What the planner picks for ``name`` (8 heads of 64, not the sizes the command
    builds with) in a causal call over LENGTH keys: (device, phase) -> Plan."""
    cls = posenc.registry.get(name)
    sizes = {"n_heads": 8, "head_dim": 64, "dim": 512}
    enc = cls(**{k: sizes[k] for k in cls.Config.required_keys()})
    plans = {}
    with patch("posenc.attn.planner.flex_available", return_value=True):  # CUDA has flex
        for device in ("CPU", "CUDA"):
            for phase, q_len in (("prefill", LENGTH), ("training", LENGTH), ("decode", 1)):
                plans[device, phase] = planner.plan(
                    enc,
                    AttnShape(1, 8, 8, q_len, LENGTH, 64),
                    AttnPositions.build(q_len, LENGTH, 1, torch.device("cpu")),
                    masked=False,
                    needs_grad=phase == "training",
                    device=torch.device(device.lower()),
                )
    return plans


#: the memory a runner that computes the bias itself holds: none (flex, ALiBi fused into
#: CPU SDPA) or less than ``[H, L, L]`` (per distance, per block of rows)
NO_TABLE = {
    "flex": "none",
    "linear": "none",
    "distance": "[H, 2L - 1] distances",
    "rows": "[H, b, L]",
    "shaw": "[H, b, L]",
    "scores": "[H, b, L]",
    "weights": "[H, b, L]",
    "path": "[H, b, L]",
}
BIAS = [n for n in posenc.available() if posenc.info(n).kind == "bias"]


@pytest.mark.parametrize("name", BIAS)
def test_memory_cost_is_what_the_planner_runs(name, capsys):
    """``posenc info`` names the runner of every call and what it holds, and ``posenc
    list`` the prefill's: an ``[H, L, L]`` table exactly where the planner materialises
    one (``table="full"``), none where the runner fuses the bias."""
    assert main(["info", name]) == 0
    text = " ".join(capsys.readouterr().out.split())
    section = text.split(" memory cost ", 1)[1].split(" paper ", 1)[0]
    said = {}
    for device, phases, memory, runner in re.findall(
        r"(CPU|CUDA) ([a-z, ]+): (.+?) \((\w+) runner\)", section
    ):
        for phase in phases.split(", "):
            said[device, phase] = (memory, runner)
    plans = _runner_plans(name)
    assert set(said) == set(plans)
    for call, chosen in plans.items():
        memory, runner = said[call]
        assert runner == chosen.runner, call
        if chosen.forget:  # FoX's clock rides in the keys of a plain runner
            assert memory.startswith("[B, H, L] clock"), call
        elif chosen.table == "full":
            assert memory == ("[H, 1, L] bias" if call[1] == "decode" else "[H, L, L] bias")
        else:
            assert memory.startswith(NO_TABLE[chosen.runner]), call
    cell = memory_cost(name)
    full = [call for call, p in plans.items() if p.table == "full" and call[1] != "decode"]
    assert ("[H, L, L] bias" in cell) == bool(full), cell
    fused = any(p.runner == "linear" for call, p in plans.items() if call[1] != "decode")
    assert ("fused" in cell) == fused
    if plans["CUDA", "prefill"].runner == "flex":
        assert "CUDA: none (flex)" in cell or cell.startswith("none (flex)")


def test_t5_and_kerple_do_not_claim_fused_alibi(capsys):
    """The fused ALiBi path (the ``linear`` runner) takes linear slopes only: T5 and KERPLE
    decode on SDPA with their bias row, ALiBi on the fused path."""
    for name, runner in (("t5", "sdpa"), ("kerple", "sdpa"), ("alibi", "linear")):
        assert _runner_plans(name)["CPU", "decode"].runner == runner
        assert main(["info", name]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert f"CPU decode: {'none' if runner == 'linear' else '[H, 1, L] bias'} (" in text
        assert f"({runner} runner)" in text
        assert "fused ALiBi" not in memory_cost(name)


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
        (["list", "--tall"], "No such option: --tall"),
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


def command_paths(command, path=()):
    """Every command path of the app: (), ("list",), ("plot", "heatmap"), ..."""
    yield path
    if hasattr(command, "list_commands"):
        ctx = command.make_context("posenc", [], resilient_parsing=True)
        for name in command.list_commands(ctx):
            yield from command_paths(command.get_command(ctx, name), (*path, name))


def test_every_command_has_help_with_an_example(capsys):
    paths = list(command_paths(get_command(build_app())))
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
