"""The terminal output of ``posenc`` and the demo: a console, and rich tables of the encodings.

:func:`console`, :func:`show` and :func:`render` print a rich table wrapped to a width, never
cut: on a terminal its width, with colour; when stdout is not one (a pipe, a file, a test)
as plain text :func:`columns` wide (``$COLUMNS``, else :data:`PLAIN_WIDTH`), so that what
is piped to a file or a pager reads the same as in an 80-column pane;
:func:`encodings_table` is the table of every registered encoding. One home, below
:mod:`posenc.cli` and :mod:`posenc.demo`, so neither imports the other for them.

What a bias encoding holds in memory is asked of the planner
(:func:`posenc.attn.planner.plan`) for the calls of :data:`CALLS`, so the tables say what
:func:`posenc.attention` does: :func:`bias_memory`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import textwrap
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple, TextIO

import torch
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table

from . import registry
from .arguments import check_int
from .attn.forget import WIDTH_STEP
from .attn.planner import AttnShape, Plan, plan
from .base import BiasEncoding
from .describe import EXAMPLE_VALUES
from .positions import AttnPositions

__all__ = [
    "CALLS",
    "LENGTH",
    "PLAIN_WIDTH",
    "PROSE_WIDTH",
    "RUNS_PAST",
    "Call",
    "Fitted",
    "bias_memory",
    "columns",
    "console",
    "encodings_table",
    "markdown_text",
    "memory_cost",
    "memory_lines",
    "papers_table",
    "plan_memory",
    "render",
    "show",
    "yes_no",
]

#: the width of plain-text output where ``$COLUMNS`` does not give one
PLAIN_WIDTH = 80
#: configuration keys that bound the positions of a learned table
BOUNDS = ("max_positions", "grid")
#: what the tables call :attr:`~posenc.EncodingInfo.extrapolates`: defined at positions past
#: the training length; whether it works there is the arena's ``extrapolation`` to measure
RUNS_PAST = "runs past training length"
#: the keys of the calls the memory column plans (``L`` in its text): long enough that
#: flex attention pays (:data:`~posenc.attn.planner.FLEX_MIN_SCORES`)
LENGTH = 4096
#: the fewest columns a :class:`Fitted` table gives a column of prose beside the others
PROSE_WIDTH = 24


class Call(NamedTuple):
    """One call of :func:`posenc.attention` whose runner the memory column reports: a
    causal self-attention over :data:`LENGTH` keys, unmasked, at default positions."""

    #: ``"CPU"`` or ``"CUDA"``
    device: str
    #: ``"prefill"`` (as many queries as keys), ``"training"`` (the same, with a backward)
    #: or ``"decode"`` (one query)
    phase: str

    @property
    def q_len(self) -> int:
        return 1 if self.phase == "decode" else LENGTH


#: the calls the memory column reports, per device: a prefill, a training step, a decode step
CALLS = tuple(Call(d, p) for d in ("CPU", "CUDA") for p in ("prefill", "training", "decode"))
#: what each runner that computes the bias itself holds beyond q, k and v (``H`` heads, ``L``
#: keys, ``b`` rows per block); a runner on the materialised table holds ``[H, q_len, L]``
RUNNER_MEMORY = {
    "flex": "none",  # the bias score by score, fused into the kernel
    "linear": "none",  # ALiBi's slopes fused into CPU SDPA
    "distance": "[H, 2L - 1] distances",
    "rows": "[H, b, L] rows at a time",
    "shaw": "[H, b, L] blocks at a time",
    "scores": "[H, b, L] scores at a time",
    "weights": "[H, b, L] weights at a time",
    "path": "[H, b, L] scores at a time",  # PaTH: and the queries carried through blocks
}
#: FoX: its clock rides in extra coordinates of a plain runner's heads (posenc.attn.forget)
CLOCK = f"[B, H, L] clock; q, k, v per head, up to {WIDTH_STEP} columns wider"


def columns() -> int:
    """The width of plain-text output: ``$COLUMNS`` where it is a whole number of at least
    1 (as a shell sets it; anything else is ignored, as rich and :mod:`shutil` do), else
    :data:`PLAIN_WIDTH`."""
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else PLAIN_WIDTH


def console(file: TextIO | None = None) -> Console:
    """A rich console on ``file`` (default: the current ``sys.stdout``): colour and the
    terminal's width on a terminal, else plain text :func:`columns` wide."""
    out = sys.stdout if file is None else file
    if out.isatty():
        return Console(file=out)
    return Console(file=out, width=columns(), color_system=None, force_terminal=False)


def render(table: RenderableType, width: int | None = None) -> str:
    """``table`` as plain text ``width`` columns wide (default: :func:`columns`), its cells
    wrapped, never cut: no colour codes, no trailing spaces, no blank lines around it."""
    if width is not None:
        check_int("width", width)
    plain = Console(width=width or columns(), color_system=None, force_terminal=False)
    with plain.capture() as captured:
        plain.print(table)
    return "\n".join(line.rstrip() for line in captured.get().splitlines()).strip("\n")


def show(table: RenderableType, file: TextIO | None = None) -> None:
    """Print ``table`` on ``file`` (default: the current ``sys.stdout``): with rich's
    colours on a terminal, wrapped to its width, else as :func:`render`'s plain text."""
    out = console(file)
    if out.is_terminal:
        out.print(table)
    else:
        print(render(table, out.width), file=out.file)


class Fitted:
    """Rows of cells as a table whose ``prose`` columns (long text: sentences, class names)
    wrap, where each of them gets at least :data:`PROSE_WIDTH` columns beside the others;
    narrower, each row stacked: its ``key`` cell, beside it every other cell on a line of
    its own after its header (``engine: vllm``), one blank line between rows. Either way
    no line is wider than the console and no cell is cut.

    Shapes:
        headers: ``[n]`` strings; rows: each ``[n]`` strings, in the headers' order.
    """

    def __init__(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        prose: Collection[str],
        key: int = 0,
    ) -> None:
        if any(len(row) != len(headers) for row in rows):
            raise ValueError(f"rows: expected {len(headers)} cells each, as headers has")
        check_int("key", key, minimum=0, maximum=len(headers) - 1)  # a column of headers
        self.headers, self.rows, self.prose, self.key = tuple(headers), rows, prose, key

    def columns(self) -> Table:
        """The rows as columns, the ``prose`` ones wrapped and the rest whole."""
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
        for header in self.headers:
            table.add_column(header, no_wrap=header not in self.prose, overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        return table

    def stacked(self) -> Table:
        """Each row as its ``key`` cell, then each other cell after its header."""
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", leading=1)
        key = self.headers[self.key]
        table.add_column(key, no_wrap=True, overflow="fold")
        table.add_column("", overflow="fold")
        others = [i for i in range(len(self.headers)) if i != self.key]
        for row in self.rows:
            table.add_row(row[self.key], "\n".join(f"{self.headers[i]}: {row[i]}" for i in others))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fixed = [  # the unwrapped columns, as wide as their widest cell or header
            max(cell_len(cell) for cell in column)
            for column in zip(self.headers, *self.rows, strict=True)
            if column[0] not in self.prose
        ]
        # three columns between two cells: padding, separator, padding
        need = sum(fixed) + 3 * len(self.headers) + PROSE_WIDTH * len(self.prose)
        yield self.columns() if need <= options.max_width else self.stacked()


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row: ``| a | b |`` -> ``["a", "b"]``."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table_lines(block: list[str], width: int) -> list[str]:
    """A Markdown table (header, ``|---|`` rule, rows) as a :class:`Fitted` table: a row
    per line where every column fits ``width`` whole, else each row stacked."""
    rows = [_cells(line) for line in block if set(line) - set("|-: ")]  # not the rule
    return render(Fitted(rows[0], rows[1:], prose=()), width).splitlines()


def markdown_text(text: str, width: int | None = None) -> str:
    """A Markdown document (headings, paragraphs, ``- `` bullets, ``|`` tables) as plain
    text ``width`` columns wide (default: :func:`columns`): each paragraph and bullet
    wrapped at spaces (a word longer than the width stays whole), each table a
    :class:`Fitted` one; headings and blank lines as they are."""
    width = width or columns()
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):  # a table: up to the first line that is not a row
            end = next(
                (j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines)
            )
            out += _table_lines(lines[i:end], width)
            i = end
            continue
        indent = "  " if line.startswith("- ") else ""
        wrapped = textwrap.wrap(
            line,
            width,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        out += wrapped or [""]
        i += 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def yes_no(flag: bool) -> str:
    """``"yes"`` or ``"no"``: how the tables show a flag."""
    return "yes" if flag else "no"


def _built(name: str) -> BiasEncoding:
    """Bias encoding ``name`` built with the example sizes
    (:data:`~posenc.describe.EXAMPLE_VALUES`)."""
    cls = registry.get(name)
    enc = cls(**{key: EXAMPLE_VALUES[key] for key in cls.Config.required_keys()})
    if not isinstance(enc, BiasEncoding):
        raise ValueError(f"{name!r} is a {cls.kind} encoding, not a bias encoding")
    return enc


def _plan(enc: BiasEncoding, call: Call) -> Plan:
    """The plan :func:`~posenc.attn.planner.plan` makes for ``enc`` in ``call``."""
    heads, head_dim = EXAMPLE_VALUES["n_heads"], EXAMPLE_VALUES["head_dim"]
    shape = AttnShape(1, heads, heads, call.q_len, LENGTH, head_dim)  # [batch, heads, ...]
    positions = AttnPositions.build(call.q_len, LENGTH, 1, torch.device("cpu"))
    device = torch.device(call.device.lower())
    training = call.phase == "training"
    return plan(enc, shape, positions, masked=False, needs_grad=training, device=device)


def plan_memory(chosen: Plan, call: Call) -> str:
    """What the runner of ``chosen`` holds beyond q, k and v in ``call``: the materialised
    table, FoX's clock, or what :data:`RUNNER_MEMORY` says of the runner."""
    if chosen.forget:
        return CLOCK
    if chosen.table == "full":
        return "[H, 1, L] bias" if call.q_len == 1 else "[H, L, L] bias"
    return RUNNER_MEMORY.get(chosen.runner, "none")


def bias_memory(name: str) -> dict[Call, tuple[str, str]]:
    """Each call of :data:`CALLS` -> the runner the planner picks for bias encoding
    ``name`` and what it holds (:func:`plan_memory`)."""
    enc = _built(name)
    out: dict[Call, tuple[str, str]] = {}
    for call in CALLS:
        chosen = _plan(enc, call)
        out[call] = (chosen.runner, plan_memory(chosen, call))
    return out


def _prefill(memory: Mapping[Call, tuple[str, str]], device: str) -> str:
    """The prefill's memory on ``device``, and the training step's where it differs; the
    runner after a ``none``."""
    run, train = (memory[Call(device, phase)] for phase in ("prefill", "training"))
    run_text, train_text = (m if m != "none" else f"none ({r})" for r, m in (run, train))
    return run_text if run_text == train_text else f"{run_text}, {train_text} to train"


def memory_cost(name: str) -> str:
    """What encoding ``name`` adds to a model's memory over a sequence, derived from its
    kind and class, and for a bias encoding from the runner the planner picks.

    ``L`` is the sequence length, ``d`` the embedding (or head) size, ``H`` the heads:

    - additive: a learned ``[L, d]`` table when it is trainable and its configuration bounds
      the positions (``max_positions``, ``grid``), else computed on the fly;
    - rotary: ``[L, d/2]`` cos and sin, computed per call (per head, and learned weights:
      frequencies or Fourier coefficients, for a trainable one);
    - bias: what the runner of a prefill (and of a training step where it differs) holds
      on the CPU and on CUDA (:func:`bias_memory`; the decode step: :func:`memory_lines`).
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
    if info.kind == "bias":
        memory = bias_memory(name)
        cpu, cuda = _prefill(memory, "CPU"), _prefill(memory, "CUDA")
        return cpu if cpu == cuda else f"CPU: {cpu}; CUDA: {cuda}"
    return "none"


def memory_lines(name: str) -> list[str]:
    """:func:`memory_cost` in full: for a bias encoding one line per device and memory,
    the calls that hold it, what it holds and the runner (``CPU prefill, training: [H, 2L -
    1] distances (distance runner)``), then the sizes; else the one line."""
    if registry.info(name).kind != "bias":
        return [memory_cost(name)]
    lines: dict[tuple[str, str, str], list[str]] = {}
    for call, (runner, memory) in bias_memory(name).items():
        lines.setdefault((call.device, memory, runner), []).append(call.phase)
    out = [
        f"{device} {', '.join(phases)}: {memory} ({runner} runner)"
        for (device, memory, runner), phases in lines.items()
    ]
    return [*out, f"(causal, L = {LENGTH} keys; H heads, B batch, b rows per block)"]


def _table() -> Table:
    """An empty table as :func:`encodings_table` and :func:`papers_table` draw it: a rule
    under the header, no edges, one space between columns."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0), header_style="bold")


def encodings_table() -> Table:
    """Every registered encoding, one row each in :func:`posenc.available` order: name,
    kind, trainable, relative, :data:`RUNS_PAST` and memory cost.

    The memory cells wrap, so that the table fits 80 columns; no cell is ever cut to
    ``…``, and each row's first line holds its name, kind and flags (``grep`` finds it)."""
    table = _table()
    table.add_column("name", no_wrap=True, overflow="fold")
    for header in ("kind", "trainable", "relative"):
        table.add_column(header, no_wrap=True, overflow="fold")
    table.add_column(RUNS_PAST, max_width=9, overflow="fold")  # the header wraps
    table.add_column("memory cost", overflow="fold")
    for name in registry.available():
        i = registry.info(name)
        flags = [yes_no(i.trainable), yes_no(i.relative), yes_no(i.extrapolates)]
        table.add_row(name, i.kind, *flags, memory_cost(name))
    return table


def papers_table(extra: Mapping[str, Mapping[str, str]] = {}) -> Table:
    """Every registered encoding's name, the ``extra`` columns (header -> name -> cell,
    blank for a name it lacks, never wrapped) and its paper, which wraps: the rest of
    ``posenc list --wide``, a table of its own so that both fit 80 columns."""
    table = _table()
    table.add_column("name", no_wrap=True, overflow="fold")
    for header in extra:
        table.add_column(header, no_wrap=True, overflow="fold")
    table.add_column("paper", overflow="fold")
    for name in registry.available():
        cells = [column.get(name, "") for column in extra.values()]
        table.add_row(name, *cells, registry.info(name).reference)
    return table
