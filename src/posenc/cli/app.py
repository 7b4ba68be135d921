"""The ``posenc`` Typer application and its error handling.

:func:`new_app` makes the root command (``--version``, plain-text help, no shell
completion, no pretty tracebacks); :func:`run` calls it the way a test or a console script
does and turns every failure into one line on stderr and an exit code:

- a bad command line (unknown command or option, bad value): click's usage line, then
  ``error: <what was wrong>``, exit code 2;
- a bad input to posenc (``ValueError``, ``TypeError``, the arena's ``CorpusError``, a
  file that cannot be read or written: ``OSError``) or a missing optional extra
  (``ImportError``, with the ``pip install`` that fixes it): ``error: <message>``, exit
  code 2, no traceback;
- Ctrl-C (``KeyboardInterrupt``): ``interrupted`` on stderr, exit code 130, no traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import version

import typer
from typer.main import get_command

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

__all__ = ["PROG", "example", "needs_extra", "new_app", "run"]

PROG = "posenc"
#: the exit code of every error that :func:`run` reports in one line
USAGE_ERROR = 2
#: the exit code after Ctrl-C (128 + SIGINT, as a shell reports it)
INTERRUPTED = 130


def example(*lines: str) -> str:
    """A command's help epilog: ``Example:`` and the given command lines, kept as written
    (click's ``\\b`` stops it rewrapping them)."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


def _version(show: bool) -> None:
    if show:
        print(f"{PROG} {version('posenc')}")
        raise typer.Exit()


def new_app() -> typer.Typer:
    """The root ``posenc`` command, without subcommands (each module's ``register`` adds
    its own)."""
    app = typer.Typer(
        name=PROG,
        help="Positional encodings for transformers: list, explain, inspect, draw and "
        "measure them.",
        epilog=example("posenc list", "posenc info rope", "posenc plot heatmap --out h.png"),
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # plain help: docstrings hold brackets that are not markup
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def root(
        show_version: bool = typer.Option(
            False, "--version", is_eager=True, callback=_version, help="Print the version."
        ),
    ) -> None:
        """Positional encodings for transformers: list, explain, inspect, draw and measure
        them."""

    return app


@contextmanager
def needs_extra(hint: str) -> Iterator[None]:
    """Re-raise an ``ImportError`` inside the block with ``hint`` (how to install the
    missing extra) appended, unless its message already says ``pip install``."""
    try:
        yield
    except ImportError as e:
        if "pip install" in str(e):
            raise
        raise ImportError(f"{e}; {hint}") from e


def _fail(message: str, usage: str | None = None) -> int:
    if usage:
        print(usage.strip(), file=sys.stderr)
    print(f"error: {message}", file=sys.stderr)
    return USAGE_ERROR


def run(app: typer.Typer, argv: Sequence[str] | None = None) -> int:
    """Run ``app`` on ``argv`` (default ``sys.argv[1:]``) as ``posenc``; return the exit
    code: the command's (0 when it returns None), 2 for any error, reported in one line,
    130 after Ctrl-C."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = get_command(app)
    try:
        # click's own steps, not command.main: typer's main turns Ctrl-C into a silent 130
        with command.make_context(PROG, args) as ctx:
            result = command.invoke(ctx)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except typer.Exit as e:  # --help, --version, ctx.exit()
        return int(e.exit_code)
    except click_errors.NoArgsIsHelpError as e:  # bare `posenc`: its help, on stderr
        print(e.ctx.get_help() if e.ctx else e.format_message(), file=sys.stderr)
        return USAGE_ERROR
    except click_errors.UsageError as e:
        return _fail(e.format_message(), e.ctx.get_usage() if e.ctx else None)
    except click_errors.ClickException as e:
        return _fail(e.format_message())
    except (typer.Abort, EOFError):  # click's Abort, or Ctrl-D at a prompt
        print("aborted", file=sys.stderr)
        return 1
    except (ValueError, TypeError, ImportError, OSError) as e:
        return _fail(str(e).strip().replace("\n", " "))
    return result if isinstance(result, int) else 0
