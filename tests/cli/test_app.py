"""posenc.cli.app: Ctrl-C ends the command with one word and exit code 130."""

import typer

from posenc.cli.app import INTERRUPTED, new_app, run


def _app_that_is_interrupted() -> typer.Typer:
    app = new_app()

    @app.command("slow")
    def slow() -> None:
        """A command the user stops with Ctrl-C."""
        raise KeyboardInterrupt

    return app


def test_ctrl_c_prints_interrupted_and_exits_130(capsys):
    assert run(_app_that_is_interrupted(), ["slow"]) == INTERRUPTED == 130
    captured = capsys.readouterr()
    assert captured.err == "interrupted\n"
    assert captured.out == ""


def test_a_registered_command_interrupted_is_the_same(monkeypatch, capsys):
    from posenc.cli import encodings, main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(encodings, "encodings_table", interrupted)
    assert main(["list"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_help_and_version_still_exit_0(capsys):
    assert run(_app_that_is_interrupted(), ["--version"]) == 0
    assert capsys.readouterr().out.startswith("posenc ")
    assert run(_app_that_is_interrupted(), ["slow", "--help"]) == 0
    assert "A command the user stops with Ctrl-C." in capsys.readouterr().out
