"""The terminal output of ``posenc`` and the demo: a console, and rich tables of the encodings.

:func:`console`, :func:`show` and :func:`render` print a rich table on a terminal, or as
plain text wide enough that no cell is wrapped or cut when stdout is not one (a pipe, a
file, a test), so the output can be read by a program; :func:`encodings_table` is the
table of every registered encoding. One home, below :mod:`posenc.cli` and
:mod:`posenc.demo`, so neither imports the other for them.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TextIO, cast

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

from . import registry
from .attn.planner import bias_memory
from .base import BiasEncoding

__all__ = [
    "PLAIN_WIDTH",
    "console",
    "encodings_table",
    "memory_cost",
    "render",
    "show",
    "yes_no",
]

#: the width of plain-text output: wider than any table row, so rich never wraps a cell
PLAIN_WIDTH = 1000
#: configuration keys that bound the positions of a learned table
BOUNDS = ("max_positions", "grid")


def console(file: TextIO | None = None) -> Console:
    """A rich console on ``file`` (default: the current ``sys.stdout``): colour and the
    terminal's width on a terminal, else plain text :data:`PLAIN_WIDTH` columns wide."""
    out = sys.stdout if file is None else file
    if out.isatty():
        return Console(file=out)
    return Console(file=out, width=PLAIN_WIDTH, color_system=None, force_terminal=False)


def render(table: RenderableType) -> str:
    """``table`` as plain text: no colour codes, no wrapping, no trailing spaces, no blank
    lines around it."""
    plain = Console(width=PLAIN_WIDTH, color_system=None, force_terminal=False)
    with plain.capture() as captured:
        plain.print(table)
    return "\n".join(line.rstrip() for line in captured.get().splitlines()).strip("\n")


def show(table: RenderableType, file: TextIO | None = None) -> None:
    """Print ``table`` on ``file`` (default: the current ``sys.stdout``): with rich's
    colours and wrapping on a terminal, else as :func:`render`'s plain text."""
    out = console(file)
    if out.is_terminal:
        out.print(table)
    else:
        print(render(table), file=out.file)


def yes_no(flag: bool) -> str:
    """``"yes"`` or ``"no"``: how the tables show a flag."""
    return "yes" if flag else "no"


def memory_cost(name: str) -> str:
    """What encoding ``name`` adds to a model's memory, derived from its kind and class.

    ``L`` is the sequence length, ``d`` the embedding (or head) size, ``H`` the heads:

    - additive: a learned ``[L, d]`` table when it is trainable and its configuration bounds
      the positions (``max_positions``, ``grid``), else computed on the fly;
    - rotary: ``[L, d/2]`` cos and sin, computed per call (per head, and learned weights:
      frequencies or Fourier coefficients, for a trainable one);
    - bias: what its backends hold (:func:`~posenc.attn.planner.bias_memory`).
    """
    cls = registry.get(name)
    info = registry.info(name)
    bounded = any(f.name in BOUNDS for f in dataclasses.fields(cls.Config))
    if info.kind == "additive":
        if info.trainable and bounded:
            return "[L, d] learned table"
        return "none (computed; a few weights)" if info.trainable else "none (computed)"
    if info.kind == "rotary":
        if getattr(cls, "width_factor", 1) > 1:  # PoPE: a phase per channel, q, k doubled
            return "[H, L, d] cos/sin; q, k twice as wide"
        if info.trainable:  # per head: RoPE-Mixed's frequencies, FoPE's coefficients
            return "[H, L, d/2] cos/sin + learned weights"
        return "[L, d/2] cos/sin"
    if info.kind == "bias":  # asked of the one place that chooses the bias backend
        return bias_memory(cast(type[BiasEncoding], cls))
    return "none"


def encodings_table() -> Table:
    """Every registered encoding: name, kind, trainable, relative, extrapolates, memory
    cost and paper, one row each, in :func:`posenc.available` order."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
    for header in ("name", "kind", "trainable", "relative", "extrapolates", "memory cost"):
        table.add_column(header, no_wrap=True)
    table.add_column("paper")
    for name in registry.available():
        i = registry.info(name)
        flags = (yes_no(i.trainable), yes_no(i.relative), yes_no(i.extrapolates))
        table.add_row(i.name, i.kind, *flags, memory_cost(name), i.reference)
    return table
