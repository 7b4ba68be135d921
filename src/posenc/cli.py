"""The ``posenc`` command: ``posenc list``, ``posenc info NAME``, ``posenc demo``.

Each subcommand is one function registered with :func:`command`; its arguments are given
with :func:`arg` (the arguments of ``argparse.ArgumentParser.add_argument``). A command that
needs an optional dependency imports it inside its function, so ``posenc list`` keeps working
without it. Adding a subcommand::

    @command("plot", "draw an encoding", arg("name"), arg("--out", default="plot.png"))
    def cmd_plot(args: argparse.Namespace) -> int:
        from .plot import ...  # matplotlib is optional
        return 0
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import __version__, registry

__all__ = ["COMMANDS", "arg", "command", "encodings_table", "format_table", "main"]

Handler = Callable[[argparse.Namespace], int]


@dataclasses.dataclass(frozen=True)
class Argument:
    """The positional and keyword arguments of one ``add_argument`` call."""

    flags: tuple[str, ...]
    options: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its name, one-line help, arguments and the function that runs it."""

    name: str
    help: str
    arguments: tuple[Argument, ...]
    run: Handler


#: every subcommand, in the order ``posenc --help`` lists them
COMMANDS: dict[str, Command] = {}


def arg(*flags: str, **options: Any) -> Argument:
    """An argument of a subcommand, as ``parser.add_argument(*flags, **options)`` takes it."""
    return Argument(flags, options)


def command(name: str, help: str, *arguments: Argument) -> Callable[[Handler], Handler]:
    """Register the decorated function as the subcommand ``name``.

    The function takes the parsed ``argparse.Namespace`` and returns the exit code.
    """

    def decorate(run: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"a command named {name!r} is already registered")
        COMMANDS[name] = Command(name, help, arguments, run)
        return run

    return decorate


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain text columns, left-aligned, two spaces apart, with a dashed rule under the header."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def encodings_table() -> str:
    """Every registered encoding with its kind, properties and summary, one per line."""
    headers = ("name", "kind", "trainable", "relative", "extrapolates", "summary")
    rows = []
    for name in registry.available():
        i = registry.info(name)
        rows.append(
            (
                i.name,
                i.kind,
                _yes_no(i.trainable),
                _yes_no(i.relative),
                _yes_no(i.extrapolates),
                i.summary,
            )
        )
    return format_table(headers, rows)


def config_table(name: str) -> str:
    """The configuration keys of encoding ``name`` with their types and defaults."""
    cls = registry.get(name)
    rows = []
    for field in dataclasses.fields(cls.Config):
        if field.default is not dataclasses.MISSING:
            default = repr(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = repr(field.default_factory())
        elif field.name == cls.size_key:
            default = "required (a model fills it in)"
        else:
            default = "required"
        kind = field.type if isinstance(field.type, str) else field.type.__name__
        rows.append((field.name, kind, default))
    if not rows:
        return "(none)"
    return format_table(("key", "type", "default"), rows)


@command("list", "list every registered encoding")
def cmd_list(args: argparse.Namespace) -> int:
    print(encodings_table())
    return 0


@command("info", "show one encoding and its configuration keys", arg("name", help="its name"))
def cmd_info(args: argparse.Namespace) -> int:
    try:
        info = registry.info(args.name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    fields = dataclasses.asdict(info)
    width = max(map(len, fields))
    for key, value in fields.items():
        shown = _yes_no(value) if isinstance(value, bool) else value
        print(f"{key.ljust(width)}  {shown}")
    print(f"\nconfig keys of posenc.create({args.name!r}, ...):")
    print(config_table(args.name))
    return 0


@command(
    "demo",
    "the first thing to run: the article's example and a miniature arena",
    arg(
        "--steps",
        type=positive_int,
        default=None,
        help="training steps per encoding (default: posenc.demo.STEPS)",
    ),
    arg("--seed", type=int, default=0, help="seed of the data and the models"),
    arg(
        "--encodings",
        nargs="+",
        metavar="NAME",
        help="train these (default: one or two of each kind)",
    ),
)
def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    try:
        demo.check_names(args.encodings or ())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    demo.run_demo(demo.STEPS if args.steps is None else args.steps, args.seed, names=args.encodings)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``posenc`` argument parser with one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="posenc", description="Positional encodings for transformers."
    )
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS.values():
        sub = subparsers.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        for argument in cmd.arguments:
            sub.add_argument(*argument.flags, **argument.options)
        sub.set_defaults(run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``posenc`` command with ``argv`` (default ``sys.argv[1:]``); return the exit
    code (2 for a usage error or an unknown encoding name)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
