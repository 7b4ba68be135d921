"""Options that take one or more values, as ``--encodings rope alibi`` (argparse's
``nargs="+"``), which click itself only offers as a repeated option.

:class:`GreedyCommand` rewrites ``--opt a b c`` into ``--opt a --opt b --opt c`` for each of
its options declared with a ``list[...]`` type (``multiple``) before click parses the
command line: the values run up to the next option (a token starting with ``-`` that is
not a number) or ``--``. Use it as ``app.command(cls=GreedyCommand)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from typer.core import TyperCommand

__all__ = ["GreedyCommand", "spread"]

_NUMBER = re.compile(r"^-\d|^-\.\d")


def _is_value(token: str) -> bool:
    return not token.startswith("-") or bool(_NUMBER.match(token))


def spread(args: list[str], options: Iterable[str]) -> list[str]:
    """``args`` with every ``OPT v1 v2 ...`` of the options ``options`` (names like
    ``"--seeds"``) written as ``OPT v1 OPT v2 ...``.

    Example:
        >>> spread(["all", "--seeds", "1", "2", "--out", "x"], ["--seeds"])
        ['all', '--seeds', '1', '--seeds', '2', '--out', 'x']
    """
    names = set(options)
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return out + args[i:]
        out.append(token)
        i += 1
        if token not in names:
            continue
        values = 0
        while i < len(args) and _is_value(args[i]):
            if values:
                out.append(token)
            out.append(args[i])
            values, i = values + 1, i + 1
    return out


class GreedyCommand(TyperCommand):
    """A typer command whose ``list[...]`` options take one or more values each time."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        multiple = [
            name
            for param in self.get_params(ctx)
            if getattr(param, "multiple", False)
            for name in param.opts
        ]
        return super().parse_args(ctx, spread(list(args), multiple))
