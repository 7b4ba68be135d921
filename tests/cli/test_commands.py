"""posenc.cli: the subcommands its docstring lists are the ones ``posenc --help`` shows."""

import re

import typer

import posenc.cli
from posenc.cli import build_app


def test_the_package_docstring_lists_every_subcommand():
    first_paragraph = (posenc.cli.__doc__ or "").split("\n\n")[0]
    _, _, names = first_paragraph.partition("): ")  # after "The ``posenc`` command (...): "
    listed = re.findall(r"``(\w+)``", names)
    commands = typer.main.get_command(build_app()).commands  # type: ignore[attr-defined]
    assert sorted(listed) == sorted(commands)
