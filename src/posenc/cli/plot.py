"""``posenc plot KIND [OPTIONS] --out FILE``: draw a figure of :mod:`posenc.plot`.

One subcommand per entry of :data:`posenc.plot.PLOTS`, built on demand from the figure
function's signature and docstring (:mod:`.figure_options`), so ``posenc plot KIND --help``
shows that figure's options and a new figure needs no edit here. An option is passed to
the function only when given: the function's own defaults apply otherwise. matplotlib
(the ``plot`` extra) is imported only when a figure is drawn.

A figure of a trained model takes the model; its command takes an arena run instead and
loads the model from it (:data:`FROM_A_RUN`: ``posenc plot attention --run RUN``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup
from typer.main import get_command

from .app import example
from .figure_options import METAVARS, FigureOption, convert_item, figure_options, help_text
from .greedy import GreedyCommand

__all__ = ["FROM_A_RUN", "PlotGroup", "attention_of_run", "figure_command", "register"]

_OUT_HELP = "The file to write: .png or .svg."


def attention_of_run(
    run: str | None = None,
    encoding: str = "rope",
    text: str | None = None,
    layer: int | None = None,
    head: int | None = None,
    model: str = "lm",
    seed: int | None = None,
) -> Any:
    """The attention probabilities of a model an arena run trained, on ``text``, per layer
    and head (:func:`posenc.plot.attention.attention` of the model that
    :func:`posenc.arena.load_model` loads).

    Args:
        run: the arena run directory that holds the trained model (required:
            ``posenc arena run extrapolation --preset quick --out DIR`` makes one).
        encoding: the encoding of the model to load, one the run trained (e.g. ``rope``).
        text: the text the model reads (one token per UTF-8 byte; default: a small Python
            function).
        layer: draw only this layer (0-based); all layers if omitted.
        head: draw only this head (0-based); all heads if omitted.
        model: ``lm`` (the causal language model) or ``mlm`` (the bidirectional masked
            one of ``nope-needs-causality``).
        seed: the training seed of the model; the run's first seed if omitted.

    Raises:
        ValueError: naming the parameter: no ``run``, an encoding or seed the run has no
            model for (listing those it has), and the figure's own (text, layer, head).

    Example:
        ``posenc plot attention --run runs/arena-quick --encoding alibi --out attn.png``
    """
    import os

    from ..arena import load_model
    from ..plot.attention import DEFAULT_TEXT, attention

    if run is None:
        raise ValueError(
            "run: pass run=... (an arena run directory): `posenc arena run extrapolation "
            "--preset quick --out DIR` makes one"
        )
    net = load_model(run, encoding, model=model, seed=seed)
    name = os.fspath(run).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    label = f"{encoding} {model}, run {name or os.fspath(run)}"
    return attention(net, DEFAULT_TEXT if text is None else text, layer, head, label=label)


#: figures of a trained model -> the function their command draws with: it takes the run
#: and loads the model
FROM_A_RUN: dict[str, Callable[..., Any]] = {"attention": attention_of_run}


def _example(kind: str, doc: str, options: list[FigureOption]) -> str:
    """The command of the docstring's ``Example:`` section if it is a ``posenc plot``
    line (on the heading's line or the lines under it, up to a blank line), else
    ``posenc plot KIND`` with each required option (its metavar as the value) and
    ``--out KIND.png``."""
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("Example:"):
            words = [line.strip().removeprefix("Example:")]
            for more in lines[i + 1 :]:
                if not more.strip():
                    break
                words.append(more)
            command = " ".join(w.strip().strip("`").strip() for w in words).strip()
            if command.startswith("posenc plot"):
                return command
    needed = [f"{o.flag} {METAVARS.get(o.annotation) or 'VALUE'}" for o in options if o.required]
    return " ".join(["posenc plot", kind, *needed, "--out", f"{kind}.png"])


def _parameter(option: FigureOption) -> inspect.Parameter:
    default = ... if option.required else None
    annotation = option.annotation if option.required else option.annotation | None
    metavar = "VALUE..." if option.members else METAVARS.get(option.annotation)
    flag = option.flag
    if option.annotation is bool:  # a switch both ways: --x/--no-x
        flag = f"{flag}/--no-{flag.removeprefix('--')}"
    return inspect.Parameter(
        option.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(default, flag, help=option.help, show_default=False, metavar=metavar),
        annotation=annotation,
    )


def figure_command(kind: str) -> Any:
    """The click command of ``posenc plot KIND``: the figure's options and ``--out``."""
    from .. import plot

    draw = FROM_A_RUN.get(kind) or plot.get(kind)  # ValueError for an unknown kind
    options = figure_options(draw)
    doc = inspect.getdoc(draw) or kind

    def draw_figure(**given: Any) -> None:
        out = given.pop("out")
        kwargs = {}
        for option in options:
            value = given[option.name]
            if value is None or (option.members and not value):
                continue  # not given: the function's default
            if option.members:
                value = [convert_item(v, option.members, option.flag) for v in value]
            kwargs[option.name] = value
        fig = draw(**kwargs)
        print(f"wrote {plot.save(fig, out)}")

    out = inspect.Parameter(
        "out",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(..., "--out", metavar="FILE", help=_OUT_HELP),
        annotation=str,
    )
    draw_figure.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*map(_parameter, options), out]
    )
    flags = {o.name: o.flag for o in options}
    draw_figure.__doc__ = help_text(doc.split("\n\n")[0], flags)
    app = typer.Typer(rich_markup_mode=None, add_completion=False)
    app.command(kind, cls=GreedyCommand, epilog=example(_example(kind, doc, options)))(draw_figure)
    return get_command(app)


class PlotGroup(TyperGroup):
    """``posenc plot``: its subcommands are the keys of :data:`posenc.plot.PLOTS`, each
    built only when asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        from ..plot import PLOTS

        return list(PLOTS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        from ..plot import PLOTS

        return figure_command(cmd_name) if cmd_name in PLOTS else None


def register(app: typer.Typer) -> None:
    """Add ``plot KIND`` to ``app``."""
    plots = typer.Typer(
        cls=PlotGroup,
        help="Draw a figure of the article (PNG or SVG).",
        epilog=example(
            "posenc plot heatmap --encoding sinusoidal --dim 128 --out h.png",
            "posenc plot rotation --out rotation.svg",
            "posenc plot KIND --help   (that figure's options)",
        ),
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    app.add_typer(plots, name="plot")
