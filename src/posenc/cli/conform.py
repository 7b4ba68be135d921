"""``posenc conform PATH [--past X]``: does each engine rotate a Hugging Face model the way
posenc reads its config (:func:`posenc.engines.conform`)?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import example, needs_extra

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``posenc conform`` to ``app``."""

    @app.command(
        "conform",
        epilog=example(
            "posenc conform ./Llama-3.1-8B/config.json",
            "posenc conform ./Phi-3-mini-128k --past 4",
        ),
    )
    def conform(
        path: Annotated[
            Path,
            typer.Argument(help="A config.json, or a model directory holding one (read locally)."),
        ],
        past: Annotated[
            float,
            typer.Option(help="Probe positions up to this many times the context."),
        ] = 2.0,
    ) -> None:
        """Each engine's rotation of the model against posenc's float64 one, layer type by
        layer type: the largest error, the first position past float32's tolerance, and
        what differs there."""
        from ..engines import conform as run_conform
        from ..engines import render_rows

        with needs_extra("pip install 'posenc[hf]'"):
            import transformers  # noqa: F401
        typer.echo(render_rows(run_conform(path, past=past)))
