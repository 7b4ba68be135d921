"""``posenc inspect PATH [--target N] [--figure FILE]``: a Hugging Face checkpoint's
positions, read from its ``config.json`` (:func:`posenc.hf.inspect_checkpoint`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..hf import frequencies_figure, inspect_checkpoint, render_report
from .app import example, needs_extra

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``posenc inspect`` to ``app``."""

    @app.command(
        "inspect",
        epilog=example(
            "posenc inspect ./Llama-3.1-8B/config.json",
            "posenc inspect ./Mistral-7B --target 131072 --figure mistral.png",
        ),
    )
    def inspect(
        path: Annotated[
            Path,
            typer.Argument(help="A config.json, or a model directory holding one (read locally)."),
        ],
        target: Annotated[
            int | None,
            typer.Option(help="A context length to reach (tokens): the extension plans."),
        ] = None,
        figure: Annotated[
            Path | None,
            typer.Option(help="Write the frequencies figure here (.png or .svg)."),
        ] = None,
    ) -> None:
        """Which position encoding a checkpoint uses and how posenc builds it: base,
        scaling, pair layout, original and extended context, the layer plan and what its
        windows let a layer see; with --target, what extend_context would set to reach
        that length, for each method the model type takes."""
        report = inspect_checkpoint(path, target=target)
        for line in render_report(report):
            typer.echo(line)
        if figure is not None:
            with needs_extra("pip install 'posenc[plot]'"):
                from ..plot import save

                written = save(frequencies_figure(report), figure)
            typer.echo(f"figure: {written}")
