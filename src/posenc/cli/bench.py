"""``posenc bench NAME [OPTIONS]``: the performance benchmarks of :mod:`posenc.bench`.

Each benchmark module has its own ``main(argv)``; the options after the benchmark's name
are passed to it as they are (the command's help lists them).
"""

from __future__ import annotations

import typer

from .app import example

__all__ = ["bias_attention_command", "register"]

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def bias_attention_command(ctx: typer.Context) -> int:
    """Time bias encodings through posenc.attention against the floor and the peers.

    The options go to python -m posenc.bench.bias_attention: --lengths N..., --encodings
    NAME..., --heads N, --head-dim N, --dtype NAME, --repeat N, --no-materialised.
    """
    from ..bench import bias_attention

    try:
        return bias_attention.main(list(ctx.args))
    except SystemExit as e:  # argparse has printed its usage and error: exit 2
        return e.code if isinstance(e.code, int) else 2


def register(app: typer.Typer) -> None:
    """Add ``bench bias-attention`` to ``app``."""
    bench = typer.Typer(
        help="Performance benchmarks: time and peak memory.",
        epilog=example("posenc bench bias-attention --lengths 1024 2048"),
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    bench.command(
        "bias-attention",
        context_settings=_PASS_THROUGH,
        epilog=example("posenc bench bias-attention --lengths 1024 2048 4096 --encodings alibi t5"),
    )(bias_attention_command)
    app.add_typer(bench, name="bench")
