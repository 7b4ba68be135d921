"""``posenc bench``: the benchmark suite of :mod:`posenc.bench.suite`.

Runs the cases at a size preset, prints the Markdown report (its tables laid out in the
terminal's width: :func:`posenc.terminal.markdown_text`) and writes
``<date>-<cpu>[...].json`` and ``.md`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

import typer

from .app import example

__all__ = ["bench_command", "register"]

CASES = (
    "rope",
    "decode",
    "bias",
    "training",
    "patterns",
    "rolling",
    "compiled",
    "rerotate",
    "host",
)


def _cases(values: list[str] | None) -> list[str]:
    """``--cases`` values, each one name or several separated by commas."""
    if not values:
        return list(CASES)
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise ValueError(f"--cases must name some of {', '.join(CASES)}, got {values}")
    return names


def bench_command(
    size: Annotated[
        str,
        typer.Option(
            help="tiny (seconds, numbers meaningless), small (~10 min on 2 cores) or full "
            "(RoPE seq 128..8192, bias L 1k..16k, training 256..2048, patterns L 1k..32k; "
            "hours).",
        ),
    ] = "small",
    cases: Annotated[
        list[str] | None,
        typer.Option(
            help="Cases to run, repeated or comma-separated: rope, decode, bias, training, "
            "patterns (window and chunk against full causal), rolling (a decode step with a "
            "rolling KV cache), compiled (eager against torch.compile), rerotate (a cache's "
            "RoPE keys shifted in place against recomputed), host (the host time of one call "
            "against the peer doing the same work). Omitted: all nine.",
        ),
    ] = None,
    out: Annotated[
        str, typer.Option(help="Folder for the JSON and Markdown files (created if missing).")
    ] = "benchmarks/results",
    repeat: Annotated[
        int | None,
        typer.Option(help="Timed rounds per implementation. Omitted: the size's own."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="Print only the paths written, not the table.")
    ] = False,
) -> None:
    """Time RoPE, a decode step, bias attention, a training step, sliding-window and
    chunked attention, a rolling-cache decode step and the host time of a call against their
    floors and the installed peers; write the results as JSON and Markdown."""
    from ..bench import markdown, suite
    from ..terminal import console, markdown_text

    chosen = _cases(cases)
    if size not in suite.SIZES:
        raise ValueError(f"--size must be one of {', '.join(suite.SIZES)}, got {size!r}")
    command = " ".join(["posenc", "bench", *sys.argv[2:]]) if sys.argv[1:2] == ["bench"] else ""
    command = command or f"posenc bench --size {size} --cases {','.join(chosen)}"
    result = suite.run(
        size=size,
        cases=chosen,
        repeat=repeat,
        command=command,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        extra={"host": {"hf_patches": _hf_patches()}},
    )
    path = suite.write(result, out)
    if not quiet:  # the Markdown file's text, its tables laid out in the terminal's width
        print(markdown_text(markdown.report(result), console().width), end="")
    print(f"wrote {path}\nwrote {path.with_suffix('.md')}")  # a line each: 80 columns


def _hf_patches() -> dict[str, Callable[[Any], Any]]:
    """The ``host`` case's patches of a transformers Llama: posenc's exact rotary, and its
    attention backend (:func:`posenc.hf.apply`)."""
    from ..hf import apply

    return {
        "exact rotary": partial(apply, rotary="exact"),
        "attn posenc": partial(apply, rotary=None, attention="posenc"),
    }


def register(app: typer.Typer) -> None:
    """Add ``bench`` to ``app``."""
    app.command(
        "bench",
        epilog=example(
            "posenc bench --size tiny",
            "posenc bench --size small --cases rope,bias --out benchmarks/results",
        ),
    )(bench_command)
