"""``posenc arena run|report|compare`` and ``posenc demo``: train small models with each
encoding, measure them, and read the results (:mod:`posenc.arena`).

``torchrun --nproc-per-node 2 -m posenc arena run ...`` runs the same command under DDP
(through ``posenc.__main__``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import example, needs_extra
from .greedy import GreedyCommand

__all__ = ["EXTRAS", "compare_command", "demo_command", "register", "report_command"]

#: what to install when an import of the arena fails
EXTRAS = "the arena needs its extras: pip install 'posenc[arena]' (and for --hf-model 'posenc[hf]')"

_PRESET = (
    "quick (about 5 min on 2 cores), standard (3 seeds; 78 min on 2 shared cores), "
    "full (hours, 3 seeds; for a GPU) or tiny (seconds, for tests)"
)
_DEVICE = "auto (CUDA when torch sees a GPU), cpu or cuda: where every model trains."
_POSITIONS = (
    "Also train length-generalization with these position samplers: randomized (Ruoss et "
    "al. 2023), pose (Zhu et al. 2024); repeat the option for both."
)
_BF16 = "Train under bfloat16 autocast (weights and optimizer stay float32)."
_OUT = "The run directory (default: runs/arena-<preset>-<time>)."
_SEEDS = "Replace the preset's seeds (one or more)."
_ENCODINGS = "Replace the preset's encodings (one or more names)."
_NO_PROGRESS = "No progress bars, and no line of units done."
_THREADS = (
    "torch's threads per process for the run (default: one per core; a resumed run: the "
    "count it started with). Two runs at once on one machine: split the cores, e.g. "
    "--threads 1 each on 2 cores; more threads than cores slows every run 7-15x."
)
_JSON = (
    "Write the run's progress on stdout as JSON, one record per line (start, a unit per "
    "unit done, end: done of total units, elapsed_s, left_s); the rest goes to stderr."
)


def run_command(
    experiments: Annotated[
        list[str], typer.Argument(metavar="EXPERIMENT...", help="One or more experiments, or all.")
    ],
    preset: Annotated[str, typer.Option(metavar="NAME", help=_PRESET)] = "quick",
    corpus: Annotated[
        str | None,
        typer.Option(metavar="PATH", help="A text file or folder (default: the Python stdlib)."),
    ] = None,
    out: Annotated[str | None, typer.Option(metavar="DIR", help=_OUT)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out.")] = False,
    seeds: Annotated[list[int] | None, typer.Option(metavar="N...", help=_SEEDS)] = None,
    encodings: Annotated[list[str] | None, typer.Option(metavar="NAME...", help=_ENCODINGS)] = None,
    hf_model: Annotated[
        str | None,
        typer.Option(metavar="DIR", help="A local Hugging Face causal LM directory to probe."),
    ] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", help=_NO_PROGRESS)] = False,
    device: Annotated[str, typer.Option(metavar="DEVICE", help=_DEVICE)] = "auto",
    bf16: Annotated[bool, typer.Option("--bf16", help=_BF16)] = False,
    positions: Annotated[
        list[str] | None, typer.Option(metavar="SAMPLER...", help=_POSITIONS)
    ] = None,
    threads: Annotated[int | None, typer.Option(metavar="N", help=_THREADS)] = None,
    json: Annotated[bool, typer.Option("--json", help=_JSON)] = False,
) -> None:
    """Train small models with every encoding and measure them."""
    with needs_extra(EXTRAS):
        from ..arena import run_arena

        run_arena(
            experiments,
            preset,
            corpus=corpus,
            out=out,
            resume=resume,
            seeds=seeds or None,
            encodings=encodings or None,
            hf_model=hf_model,
            bars=not no_progress,
            device=device,
            bf16=bf16,
            samplers=positions or None,
            threads=threads,
            records=json,
        )


def report_command(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory.")],
    figures: Annotated[
        Path | None, typer.Option(metavar="DIR", help="Also write each figure as a PNG here.")
    ] = None,
) -> None:
    """Rebuild a run's report.html from its results.json."""
    with needs_extra(EXTRAS):
        from ..arena.reporting.report import write_figures, write_report
        from ..arena.reporting.results import load_results

        results = load_results(run_dir)
        print(write_report(run_dir, results))
        for path in write_figures(figures, results) if figures else ():
            print(path)


def compare_command(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="The first run directory.")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", help="The second run directory.")],
) -> None:
    """Print the differences between two runs."""
    with needs_extra(EXTRAS):
        from ..arena.reporting.compare import compare
        from ..arena.reporting.results import load_results

        print(compare(load_results(run_a), load_results(run_b)))


def demo_command(
    preset: Annotated[
        str, typer.Option(metavar="NAME", help="The arena preset: " + _PRESET)
    ] = "quick",
    out: Annotated[str | None, typer.Option(metavar="DIR", help=_OUT)] = None,
    seeds: Annotated[list[int] | None, typer.Option(metavar="N...", help=_SEEDS)] = None,
    encodings: Annotated[list[str] | None, typer.Option(metavar="NAME...", help=_ENCODINGS)] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", help=_NO_PROGRESS)] = False,
) -> None:
    """The first thing to run: the article's example, then the arena's quick preset."""
    with needs_extra(EXTRAS):
        from .. import demo

        demo.run_demo(
            preset,
            out=out,
            seeds=seeds or None,
            encodings=encodings or None,
            bars=not no_progress,
        )


def register(app: typer.Typer) -> None:
    """Add ``arena run|report|compare`` and ``demo`` to ``app``."""
    arena = typer.Typer(
        help="Train small models with every encoding and measure them (run, report, compare).",
        epilog=example("posenc arena run all --preset quick", "posenc arena report runs/full"),
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    arena.command(
        "run",
        cls=GreedyCommand,
        epilog=example(
            "posenc arena run all --preset quick",
            "posenc arena run extrapolation --encodings rope alibi --out runs/two",
            "posenc arena run extrapolation --preset full --out runs/full --resume",
            "posenc arena run all --preset quick --threads 1 --json > progress.jsonl",
            "torchrun --nproc-per-node 2 -m posenc arena run extrapolation --out runs/ddp",
        ),
    )(run_command)
    arena.command("report", epilog=example("posenc arena report runs/full --figures docs/images"))(
        report_command
    )
    arena.command("compare", epilog=example("posenc arena compare runs/a runs/b"))(compare_command)
    app.add_typer(arena, name="arena")
    app.command(
        "demo",
        cls=GreedyCommand,
        epilog=example("posenc demo", "posenc demo --preset tiny --encodings rope alibi"),
    )(demo_command)
