"""``posenc list`` and ``posenc info NAME``: the registered encodings, as tables."""

from __future__ import annotations

import sys
from typing import Annotated, TextIO

import typer
from rich import box
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from .. import describe, registry
from ..terminal import console, encodings_table, memory_cost, show, yes_no
from .app import example

__all__ = ["EXAMPLE_HEADING", "info_command", "list_command", "register"]

#: the line after which ``posenc info`` prints the example, alone up to the end
EXAMPLE_HEADING = "example (runs as is):"


def list_command() -> None:
    """List every registered encoding: kind, properties, memory cost and paper."""
    show(encodings_table())


def _fields(name: str) -> Table:
    info = registry.info(name)
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in (
        ("kind", info.kind),
        ("trainable", yes_no(info.trainable)),
        ("relative", yes_no(info.relative)),
        ("extrapolates", yes_no(info.extrapolates)),
        ("memory cost", memory_cost(name)),
        ("paper", info.reference),
    ):
        table.add_row(key, value)
    return table


def _config(name: str) -> Table | str:
    keys = describe.config_keys(name)
    if not keys:
        return "(none)"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
    for header in ("key", "type", "default"):
        table.add_column(header, no_wrap=True)
    table.add_column("meaning")
    for key in keys:
        table.add_row(key.name, key.type, key.default, key.meaning)
    return table


def _show_code(out: Console, code: str, file: TextIO) -> None:
    if out.is_terminal:
        out.print(Syntax(code, "python", theme="ansi_dark", background_color="default"))
    else:  # plain, so that it can be cut out and run
        print(code, file=file, end="")


def info_command(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A registered encoding's name.")],
) -> None:
    """Show one encoding: what it does, its formula, configuration keys, paper and a
    minimal example that runs."""
    info = registry.info(name)  # ValueError naming the known encodings
    file = sys.stdout
    out = console(file)
    out.print(f"{info.name}: {info.summary}", markup=False, highlight=False)
    out.print()
    show(_fields(name), file)
    out.print("\nformula:", markup=False)
    formula = "\n".join(f"  {line}" for line in info.formula.splitlines()) or "  (none)"
    out.print(formula, markup=False, highlight=False, soft_wrap=True)
    out.print(f"\nconfig keys of posenc.create({name!r}, ...):", markup=False, highlight=False)
    show(_config(name), file)
    out.print(f"\n{EXAMPLE_HEADING}", markup=False)
    _show_code(out, describe.example(name), file)


def register(app: typer.Typer) -> None:
    """Add ``list`` and ``info`` to ``app``."""
    app.command("list", epilog=example("posenc list", "posenc list | grep rotary"))(list_command)
    app.command("info", epilog=example("posenc info rope", "posenc info alibi"))(info_command)
