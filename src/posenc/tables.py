"""Rich tables of the registered encodings, for the ``posenc`` command and the demo.

One home for the table helpers, in the tools layer: :mod:`posenc.cli` prints them and
:mod:`posenc.demo` prints them, and neither imports the other for them. When stdout is not a
terminal (a pipe, a file, a test), :func:`console` writes plain text wide enough that no
cell is wrapped or cut, so the output can be read by a program.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TextIO

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

from . import registry
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


def _overrides(cls: type, base: type, attribute: str) -> bool:
    return getattr(cls, attribute) is not getattr(base, attribute)


def memory_cost(name: str) -> str:
    """What encoding ``name`` adds to a model's memory, derived from its kind and class.

    ``L`` is the sequence length, ``d`` the embedding (or head) size, ``H`` the heads:

    - additive: a learned ``[L, d]`` table when it is trainable and its configuration bounds
      the positions (``max_positions``, ``grid``), else computed on the fly;
    - rotary: ``[L, d/2]`` cos and sin, computed per call (plus the learned frequencies of
      a trainable one);
    - bias: an ``[H, L, L]`` bias where SDPA needs it materialised; none on the fused
      linear-bias path (ALiBi) or under flex attention; one table per forward, shared by the
      layers, when training on the CPU; Shaw's values need the scores themselves (math
      path), except when training on the CPU (blocks of 64 queries).
    """
    cls = registry.get(name)
    info = registry.info(name)
    bounded = any(f.name in BOUNDS for f in dataclasses.fields(cls.Config))
    if info.kind == "additive":
        if info.trainable and bounded:
            return "[L, d] learned table"
        return "none (computed; a few weights)" if info.trainable else "none (computed)"
    if info.kind == "rotary":
        return "[L, d/2] cos/sin" + (" + learned frequencies" if info.trainable else "")
    if info.kind == "bias":
        if _overrides(cls, BiasEncoding, "adds_to_values"):
            return "[H, L, L] scores, or [H, 64, L] blocks (CPU training)"
        if _overrides(cls, BiasEncoding, "linear_slopes"):
            return "[H, L, L] bias, or none (fused ALiBi path)"
        return "[H, L, L] bias, or none (flex)"
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
