"""``posenc list`` and ``posenc info NAME``: the registered encodings, as tables.

Both fit 80 columns, on a terminal and piped to a file (``$COLUMNS`` wide where it is
set: :func:`posenc.terminal.columns`): ``list`` shows name, kind, the flags and the
memory cost, which wraps (``--wide`` adds a second table of the measured extrapolation and
the paper, which wraps); ``info`` wraps its values and its formula and, where the meaning
of a configuration key would get fewer than :data:`MEANING_WIDTH` columns, stacks each key
over its meaning. No name or cell is ever cut. Off a terminal both print plain text, without colour.

"runs past training length" is what an encoding declares
(:attr:`~posenc.EncodingInfo.extrapolates`: defined at positions past it); "extrapolation"
is what the arena measured, read from the published run the way ``posenc guide`` reads it
(:func:`posenc.guide.published_run`, :func:`posenc.arena.read_measurements`).
"""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING, Annotated, TextIO

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .. import describe, registry
from ..guide import published_run
from ..terminal import (
    RUNS_PAST,
    console,
    encodings_table,
    memory_lines,
    papers_table,
    show,
    yes_no,
)
from .app import example

if TYPE_CHECKING:
    from ..arena.experiments.extrapolation import Extrapolation

__all__ = [
    "EXAMPLE_HEADING",
    "EXTRAPOLATION",
    "MEANING_WIDTH",
    "extrapolations",
    "info_command",
    "list_command",
    "register",
]

#: the line after which ``posenc info`` prints the example, alone up to the end
EXAMPLE_HEADING = "example (runs as is):"
#: the indent of the formula's lines
INDENT = "  "
#: what the tables call the arena's measured extrapolation
EXTRAPOLATION = "extrapolation"
#: the fewest columns the meaning of a configuration key gets beside its key, type and
#: default; on a narrower terminal each key is stacked over its meaning
MEANING_WIDTH = 32
#: what ``posenc list`` says under its table: the flag, then the memory cost
RUNS_PAST_NOTE = f"{RUNS_PAST}: positions past it are defined (no table that ends there)."
MEMORY_NOTE = (
    "memory cost: held beyond q, k and v over L tokens (d the embedding or head size, H "
    "heads, B batch, b rows per block); a bias encoding's by the runner posenc.attention "
    "picks (each call: posenc info NAME)."
)


def extrapolations() -> dict[str, Extrapolation]:
    """Each encoding's extrapolation in the arena run published with posenc, as the arena
    judges it, by name; ``{}`` where none is installed."""
    run = published_run()
    if run is None:
        return {}
    from ..arena import read_measurements  # the arena's modules only when a run is read

    return {e.encoding: e for e in read_measurements(run).extrapolations()}


def _bar() -> str:
    from ..arena.experiments.extrapolation import EXTRAPOLATES

    return f"≤ ×{EXTRAPOLATES:g}"


def _cell(e: Extrapolation) -> str:
    """``posenc list --wide``'s extrapolation cell: the ratio and the arena's verdict."""
    if e.ratio is None:
        return f"stops at {e.ran_up_to}" if e.ran_up_to is not None else "cannot run"
    return f"×{e.ratio:.3g} ({yes_no(e.extrapolates)})"


def _measured(e: Extrapolation | None) -> str:
    """``posenc info``'s extrapolation line: what the published run measured, and what the
    arena makes of it."""
    if e is None:
        return "not in the published arena run"
    times = e.longest // e.train_length
    where = (
        f"from the training length to {times} times it ({e.train_length} → {e.longest} "
        f"tokens, {e.mode} mode)"
    )
    if e.ratio is None:
        past = f"past {e.ran_up_to} tokens" if e.ran_up_to is not None else "at all"
        return f"{e.note or f'cannot run {past}'} in the published arena run"
    verdict = "extrapolates" if e.extrapolates else "does not extrapolate"
    return (
        f"{e.metric} ×{e.ratio:.3g} {where} in the published arena run: {verdict} "
        f"(the arena's bar: {_bar()})"
    )


def _list_note(found: dict[str, Extrapolation]) -> str:
    if not found:  # not measured here: where it is
        return f"{RUNS_PAST_NOTE} How well a model does there: posenc list --wide. {MEMORY_NOTE}"
    e = next(iter(found.values()))
    times = e.longest // e.train_length
    return (
        f"{RUNS_PAST_NOTE} {EXTRAPOLATION}: how well a model does there, {e.metric} at "
        f"{times} times the training length ({e.longest} tokens) over that at it "
        f"({e.train_length}) in the published arena run; yes: {_bar()}, the arena's bar for "
        f"extrapolates; blank: not in that run. {MEMORY_NOTE}"
    )


def list_command(
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            help="Also the measured extrapolation and the paper, in a second table.",
        ),
    ] = False,
) -> None:
    """List every registered encoding: kind, properties and memory cost (with --wide, the
    measured extrapolation and the paper too)."""
    found = extrapolations() if wide else {}
    parts: list[RenderableType] = [encodings_table()]
    if wide:
        extra = {EXTRAPOLATION: {name: _cell(e) for name, e in found.items()}} if found else {}
        parts += ["", papers_table(extra)]
    parts += ["", Text(_list_note(found))]
    show(Group(*parts))


def _fields(name: str) -> Table:
    info = registry.info(name)
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    rows = [
        ("kind", info.kind),
        ("trainable", yes_no(info.trainable)),
        ("relative", yes_no(info.relative)),
        (RUNS_PAST, yes_no(info.extrapolates)),
    ]
    if published_run() is not None:
        rows.append((EXTRAPOLATION, _measured(extrapolations().get(name))))
    rows += [("memory cost", "\n".join(memory_lines(name))), ("paper", info.reference)]
    for key, value in rows:
        table.add_row(key, value)
    return table


class ConfigKeys:
    """The configuration keys of an encoding as a table of key, type, default and meaning,
    the meaning wrapped; where it would get fewer than :data:`MEANING_WIDTH` columns, each
    key with its type and default stacked over its meaning."""

    def __init__(self, keys: list[describe.ConfigKey]) -> None:
        self.keys = keys

    def columns(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
        for header in _KEY_COLUMNS:
            table.add_column(header, no_wrap=True)
        table.add_column("meaning", overflow="fold")
        for key in self.keys:
            table.add_row(key.name, key.type, key.default, key.meaning)
        return table

    def stacked(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", leading=1)
        table.add_column("key", no_wrap=True, overflow="fold")
        table.add_column("type = default, meaning", overflow="fold")
        for key in self.keys:
            table.add_row(key.name, f"{key.type} = {key.default}\n{key.meaning}")
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        cells = [_KEY_COLUMNS, *((k.name, k.type, k.default) for k in self.keys)]
        fixed = [max(cell_len(cell) for cell in column) for column in zip(*cells, strict=True)]
        # three columns between two cells: padding, separator, padding
        fits = sum(fixed) + 3 * len(fixed) + MEANING_WIDTH <= options.max_width
        yield self.columns() if fits else self.stacked()


#: the columns of a configuration key that are never wrapped, beside its meaning
_KEY_COLUMNS = ("key", "type", "default")


def _config(name: str) -> ConfigKeys | str:
    keys = describe.config_keys(name)
    return ConfigKeys(keys) if keys else "(none)"


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
    width = out.width - len(INDENT)  # a wrapped line goes on indented twice
    for line in (info.formula or "(none)").splitlines():
        text = "\n".join(textwrap.wrap(line, width, subsequent_indent=INDENT))
        out.print(textwrap.indent(text, INDENT), markup=False, highlight=False, soft_wrap=True)
    out.print(f"\nconfig keys of posenc.create({name!r}, ...):", markup=False, highlight=False)
    show(_config(name), file)
    out.print(f"\n{EXAMPLE_HEADING}", markup=False)
    _show_code(out, describe.example(name), file)


def register(app: typer.Typer) -> None:
    """Add ``list`` and ``info`` to ``app``."""
    app.command(
        "list", epilog=example("posenc list", "posenc list --wide", "posenc list | grep rotary")
    )(list_command)
    app.command("info", epilog=example("posenc info rope", "posenc info alibi"))(info_command)
