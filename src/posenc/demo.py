"""The demo a newcomer runs first (``make demo`` or ``posenc demo``).

It prints (a) every registered encoding, (b) the source article's worked example computed
for real, and (c) runs the arena's quick preset (:mod:`posenc.arena`): small models trained
with each encoding on the Python standard library and on synthetic tasks, measured for
extrapolation, layer plans, context extension, length generalisation and NoPE against
causality (lost in the middle is left out of the quick preset, with one line that says why
and where the standard run's results are); it prints the tables and the path of the report.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from . import registry
from .base import AdditiveEncoding
from .terminal import console, encodings_table, render

__all__ = ["run_demo", "worked_example"]

EMBEDDING = (0.51, -0.22, 0.88, 0.14)  # the article's embedding of "DataCamp" (dim 4)


def worked_example(position: int) -> torch.Tensor:
    """The article's embedding ``[0.51, -0.22, 0.88, 0.14]`` plus the dim-4 sinusoidal
    encoding of ``position``: ``[0.51, 0.78, 0.88, 1.14]`` at position 0.

    Shapes:
        returns ``[4]``.
    """
    enc = registry.create("sinusoidal", dim=4)
    x = torch.tensor(EMBEDDING).view(1, 1, 4)  # [batch, seq, dim]
    return enc(x, positions=torch.tensor([position]))[0, 0]


def echo(line: str) -> None:
    """Print ``line`` at once (the default output of :func:`run_demo`)."""
    print(line, flush=True)


def _vector(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:5.2f}" for v in t.tolist()) + "]"


def _print_worked_example(out: Callable[[str], Any]) -> None:
    enc = registry.create("sinusoidal", dim=4)
    assert isinstance(enc, AdditiveEncoding)  # create() returns an Encoding of any kind
    embedding = _vector(torch.tensor(EMBEDDING))
    out("The article's worked example (dimension 4, sinusoidal encoding):")
    for position, note in ((0, "what the first layer receives"), (5, "same token, new vector")):
        pe = enc.encode(torch.tensor([position]))[0]
        out(f"  position {position}:  {embedding}  embedding of the token 'DataCamp'")
        out(f"             + {_vector(pe)}  encoding of position {position}")
        out(f"             = {_vector(worked_example(position))}  {note}")


def run_demo(
    preset: str = "quick",
    out: str | Path | None = None,
    seeds: Sequence[int] | None = None,
    encodings: Sequence[str] | None = None,
    bars: bool = True,
    echo_line: Callable[[str], Any] = echo,
) -> Path:
    """Print the encodings and the article's worked example, then run every arena experiment.

    Args:
        preset: the arena preset (``quick``: about 8 minutes on 2 cores).
        out: the run directory (default ``runs/arena-<preset>-<time>``).
        seeds: replace the preset's seeds.
        encodings: replace the preset's encodings.
        bars: draw progress bars.
        echo_line: called with each line the demo itself prints.

    Returns:
        the run directory, which holds ``report.html``.
    """
    from .arena import run_arena

    echo_line("posenc: positional encodings for transformers\n")
    echo_line(render(encodings_table()))
    echo_line("")
    _print_worked_example(echo_line)
    echo_line("")
    arena = (
        f"The arena ({preset} preset): the same small TransformerLM trained with each encoding, "
        "on the same data, budget and seed, then measured."
    )
    echo_line(textwrap.fill(arena, console().width))  # the terminal's width, 80 off one
    return run_arena(["all"], preset, out=out, seeds=seeds, encodings=encodings, bars=bars)
