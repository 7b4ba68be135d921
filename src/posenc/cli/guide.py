"""``posenc guide``: the when-to-use guide (:mod:`posenc.guide`) on the command line, one
flag per need, with the numbers of the newest arena run under the current directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..guide import FLAGS, NEEDS, find_run, guide, published_run, render
from ..terminal import console
from .app import example

__all__ = ["register"]

_RUN_HELP = (
    "An arena run directory (or its results.json) whose numbers back the answers; default: "
    "the newest runs/arena-*/ here with a results.json, else the standard preset's published "
    "results (docs/results/standard/)."
)


#: the widest the guide's prose is laid out, on however wide a terminal; the narrowest
#: :func:`posenc.guide.render` takes
WIDEST, NARROWEST = 100, 40


def _width() -> int:
    """The guide's width: the terminal's, or ``$COLUMNS`` (else 80) off a terminal
    (:func:`posenc.terminal.console`), kept to lines of 40 to 100 columns."""
    return min(WIDEST, max(NARROWEST, console().width))


def _flag(need: str) -> Any:
    """The option of one need: its flag, and what it means as the help."""
    return typer.Option(FLAGS[need], help=NEEDS[need])


def register(app: typer.Typer) -> None:
    """Add ``posenc guide`` to ``app``."""

    @app.command(
        "guide",
        epilog=example(
            "posenc guide",
            "posenc guide --need-extrapolation --simple",
            "posenc guide --vision --run runs/arena-quick-20250101-120000",
        ),
    )
    def guide_command(
        need_extrapolation: Annotated[bool, _flag("extrapolation")] = False,
        simple: Annotated[bool, _flag("simple")] = False,
        fixed_length: Annotated[bool, _flag("fixed-length")] = False,
        distance_grammar: Annotated[bool, _flag("distance-grammar")] = False,
        general_llm: Annotated[bool, _flag("general-llm")] = False,
        low_memory: Annotated[bool, _flag("low-memory")] = False,
        vision: Annotated[bool, _flag("vision")] = False,
        video: Annotated[bool, _flag("video")] = False,
        time_series: Annotated[bool, _flag("time-series")] = False,
        run: Annotated[Path | None, typer.Option("--run", metavar="DIR", help=_RUN_HELP)] = None,
    ) -> None:
        """Which positional encoding to use: the situations your flags select (all without
        flags), the registered encodings for each, why, and what an arena run measured."""
        chosen = {
            "extrapolation": need_extrapolation,
            "simple": simple,
            "fixed-length": fixed_length,
            "distance-grammar": distance_grammar,
            "general-llm": general_llm,
            "low-memory": low_memory,
            "vision": vision,
            "video": video,
            "time-series": time_series,
        }
        needs = [need for need, on in chosen.items() if on]
        where = run if run is not None else find_run() or published_run()
        typer.echo(render(guide(needs, where), where, _width()), nl=False)
