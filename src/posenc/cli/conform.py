"""``posenc conform PATH [--past X] [--gguf FILE]``: does each engine rotate a Hugging Face
model the way posenc reads its config (:func:`posenc.engines.conform`)? With ``--gguf``,
llama.cpp's rows read that GGUF file's metadata instead of converting the config."""

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
            "posenc conform ./Qwen2.5-7B-Instruct --gguf qwen2.5-7b-instruct-q4_k_m.gguf",
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
        gguf: Annotated[
            Path | None,
            typer.Option(help="A GGUF file of the model: llama.cpp's rows read its metadata."),
        ] = None,
    ) -> None:
        """Each engine's rotation of the model against posenc's float64 one, layer type by
        layer type: the largest error, the first position past float32's tolerance, and
        what differs there."""
        from ..engines import ENGINES, render_rows
        from ..engines import conform as run_conform
        from ..engines.llama_engine import gguf_file_engine

        with needs_extra("pip install 'posenc[hf]'"):
            import transformers  # noqa: F401
        engines = dict(ENGINES)
        if gguf is not None:  # llama.cpp's rows: the file's metadata, read with `gguf`
            with needs_extra("pip install 'posenc[gguf]'"):
                engines["llama.cpp"] = gguf_file_engine(gguf)
        typer.echo(render_rows(run_conform(path, past=past, engines=engines)))
