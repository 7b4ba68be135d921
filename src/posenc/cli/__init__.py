"""The ``posenc`` command (typer, with rich tables): ``list``, ``info``, ``inspect``,
``conform``, ``guide``, ``plot``, ``arena``, ``demo``, ``bench``.

Each subcommand lives in a module of this package with a function ``register(app)`` that
adds it to the :class:`typer.Typer` application; :data:`COMMANDS` lists those modules in the
order ``posenc --help`` shows them. Adding a subcommand: a module ::

    import typer
    from .app import example

    def hello(name: str) -> None:
        '''Say hello (the first line is the command's help).'''
        print(f"hello {name}")

    def register(app: typer.Typer) -> None:
        app.command("hello", epilog=example("posenc hello world"))(hello)

and one line in :data:`COMMANDS`. Every command's help shows an example (``epilog``).
A command that needs an optional extra imports it inside its function, so ``posenc
--help`` and ``posenc list`` import neither matplotlib nor transformers. Errors
(``ValueError``, ``TypeError``, a missing extra's ``ImportError``) become one line on
stderr and exit code 2 (:func:`posenc.cli.app.run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import typer

from . import arena, bench, conform, encodings, guide, inspect, plot
from .app import new_app, run

__all__ = ["COMMANDS", "build_app", "main"]

#: the modules whose ``register(app)`` adds the subcommands, in help order
COMMANDS: tuple[ModuleType, ...] = (encodings, inspect, conform, guide, plot, arena, bench)


def build_app() -> typer.Typer:
    """The ``posenc`` application with every subcommand of :data:`COMMANDS`."""
    app = new_app()
    for module in COMMANDS:
        module.register(app)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``posenc`` command with ``argv`` (default ``sys.argv[1:]``); return the exit
    code (0 on success, 2 for a bad command line or a bad input, reported in one line).
    """
    return run(build_app(), argv)
