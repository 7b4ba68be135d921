"""The ``posenc`` command: ``list``, ``info NAME``, ``demo``, ``arena run|report|compare`` and
``plot KIND --out FILE``.

Each subcommand is a function ``cmd_NAME(args) -> exit code`` listed in :data:`COMMANDS` (a
plain dict; the first line of its docstring is its help) whose arguments are declared in
:func:`build_parser`. A command that needs an optional dependency imports it inside its
function, so ``posenc list`` keeps working without it. Adding a subcommand::

    def cmd_plot(args: argparse.Namespace) -> int:
        '''draw an encoding'''
        from .plot import ...  # matplotlib is optional
        return 0

then ``"plot": cmd_plot`` in :data:`COMMANDS` and its ``add_argument`` lines in
:func:`build_parser`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version

from . import registry
from .tables import config_table, encodings_table, yes_no

__all__ = ["COMMANDS", "build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]


def cmd_list(args: argparse.Namespace) -> int:
    """list every registered encoding"""
    print(encodings_table())
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """show one encoding and its configuration keys"""
    try:
        info = registry.info(args.name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    fields = dataclasses.asdict(info)
    width = max(map(len, fields))
    for key, value in fields.items():
        shown = yes_no(value) if isinstance(value, bool) else value
        print(f"{key.ljust(width)}  {shown}")
    print(f"\nconfig keys of posenc.create({args.name!r}, ...):")
    print(config_table(args.name))
    return 0


def _arena_command(run: Callable[[], int]) -> int:
    """Run a command of the arena: a missing extra or a bad input (a corpus, an encoding the
    arena cannot train, a run directory in use...) is one line on stderr and exit code 2."""
    try:
        return run()
    except ImportError as e:  # an extra is missing
        extras = "pip install 'posenc[arena]' (and for --hf-model 'posenc[hf]')"
        print(f"error: {e}; the arena needs its extras: {extras}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def cmd_demo(args: argparse.Namespace) -> int:
    """the first thing to run: the article's example, then the arena's quick preset"""

    def run() -> int:
        from . import demo

        options = {"out": args.out, "seeds": args.seeds, "encodings": args.encodings}
        demo.run_demo(args.preset, bars=not args.no_progress, **options)
        return 0

    return _arena_command(run)


def cmd_arena(args: argparse.Namespace) -> int:
    """train small models with every encoding and measure them (run, report, compare)"""

    def run() -> int:
        from .arena import command

        return command.main(args)

    return _arena_command(run)


#: the options of ``posenc plot`` -> the keyword argument of the figure's function
PLOT_OPTIONS = {
    "encoding": "--encoding",
    "dim": "--dim",
    "positions": "--positions",
    "n_heads": "--n-heads",
    "head_dim": "--head-dim",
    "length": "--length",
    "base": "--base",
}


def cmd_plot(args: argparse.Namespace) -> int:
    """draw a figure of the article (posenc plot heatmap --out heatmap.png)"""
    import inspect

    from . import plot

    try:
        draw = plot.get(args.kind)
        taken = inspect.signature(draw).parameters
        options = {
            key: getattr(args, key) for key in PLOT_OPTIONS if getattr(args, key) is not None
        }
        for key in options:
            if key not in taken:
                print(f"error: plot {args.kind} does not take {PLOT_OPTIONS[key]}", file=sys.stderr)
                return 2
        fig = draw(**options)
        path = plot.save(fig, args.out)
    except ImportError as e:  # matplotlib, the plot extra, is missing
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


#: every subcommand, in the order ``posenc --help`` lists them
COMMANDS: dict[str, Handler] = {
    "list": cmd_list,
    "info": cmd_info,
    "demo": cmd_demo,
    "arena": cmd_arena,
    "plot": cmd_plot,
}


def build_parser() -> argparse.ArgumentParser:
    """The ``posenc`` argument parser with one subparser per command in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="posenc", description="Positional encodings for transformers."
    )
    parser.add_argument("--version", action="version", version=f"posenc {version('posenc')}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub = {}
    for name, run in COMMANDS.items():
        text = (run.__doc__ or "").strip().splitlines()[0]
        sub[name] = subparsers.add_parser(name, help=text, description=text)
        sub[name].set_defaults(run=run)
    sub["info"].add_argument("name", help="its name")
    from .arena.command import add_arguments as arena_arguments

    arena_arguments(sub["arena"])
    sub["demo"].add_argument("--preset", default="quick", help="the arena preset (quick)")
    sub["demo"].add_argument("--out", help="run directory (default: runs/arena-<preset>-<time>)")
    sub["demo"].add_argument("--seeds", type=int, nargs="+", help="replace the preset's seeds")
    sub["demo"].add_argument(
        "--encodings", nargs="+", metavar="NAME", help="replace the preset's encodings"
    )
    sub["demo"].add_argument("--no-progress", action="store_true", help="no progress bars")
    _plot_arguments(sub["plot"])
    return parser


def _plot_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``posenc plot``: the figure, its options (each passed to the
    figure's function only when given) and the file to write."""
    from .plot import PLOTS

    parser.add_argument("kind", choices=list(PLOTS), metavar="KIND", help=f"one of {list(PLOTS)}")
    parser.add_argument("--encoding", metavar="NAME", help="the encoding to draw")
    for option, kind in [
        ("--dim", "the embedding size"),
        ("--positions", "how many positions"),
        ("--n-heads", "how many heads"),
        ("--head-dim", "the head size"),
        ("--length", "the sequence length"),
    ]:
        parser.add_argument(option, type=int, metavar="N", help=kind)
    parser.add_argument("--base", type=float, metavar="X", help="the wavelength base")
    parser.add_argument("--out", required=True, metavar="FILE", help="the .png or .svg to write")


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
