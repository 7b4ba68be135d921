"""The ``posenc arena`` subcommand: ``run``, ``report`` and ``compare``.

Examples::

    posenc arena run all --preset quick
    posenc arena run extrapolation --preset full --out runs/full --resume
    torchrun --nproc-per-node 2 -m posenc arena run extrapolation --out runs/ddp
    posenc arena report runs/full --figures docs/images
    posenc arena compare runs/a runs/b
"""

from __future__ import annotations

import argparse

from .experiments import EXPERIMENTS

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``posenc arena``'s sub-subcommands on ``parser``."""
    sub = parser.add_subparsers(dest="arena_command", metavar="ARENA_COMMAND", required=True)
    run = sub.add_parser(
        "run",
        help="train and measure (EXPERIMENT ... or all)",
        description="Train small models with every encoding and measure them. Example: "
        "posenc arena run all --preset quick",
    )
    run.add_argument(
        "experiments",
        nargs="+",
        metavar="EXPERIMENT",
        help=f"one or more of: {', '.join(EXPERIMENTS)}, or all",
    )
    run.add_argument(
        "--preset",
        default="quick",
        help="quick (<= 5 min on 2 cores), full (hours, 3 seeds) or tiny (seconds, for tests)",
    )
    run.add_argument("--corpus", help="a text file or folder (default: the Python stdlib)")
    run.add_argument("--out", help="run directory (default: runs/arena-<preset>-<time>)")
    run.add_argument("--resume", action="store_true", help="continue the run in --out")
    run.add_argument("--seeds", type=int, nargs="+", help="replace the preset's seeds")
    run.add_argument(
        "--encodings", nargs="+", metavar="NAME", help="replace the preset's encodings"
    )
    run.add_argument("--hf-model", help="a local Hugging Face causal LM directory to probe")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    report = sub.add_parser(
        "report",
        help="rebuild report.html from results.json",
        description="Rebuild a run's report.html. Example: posenc arena report runs/full",
    )
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--figures", metavar="DIR", help="also write each figure as a PNG here")
    compare = sub.add_parser(
        "compare",
        help="print the differences between two runs",
        description="Compare two runs. Example: posenc arena compare runs/a runs/b",
    )
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")


def main(args: argparse.Namespace) -> int:
    """Run the ``posenc arena`` subcommand in ``args``; return the exit code."""
    from .compare import compare
    from .report import write_figures, write_report
    from .results import load_results

    if args.arena_command == "run":
        from .run import run_arena

        run_arena(
            args.experiments,
            args.preset,
            corpus=args.corpus,
            out=args.out,
            resume=args.resume,
            seeds=args.seeds,
            encodings=args.encodings,
            hf_model=args.hf_model,
            bars=not args.no_progress,
        )
    elif args.arena_command == "report":
        results = load_results(args.run_dir)
        print(write_report(args.run_dir, results))
        for path in write_figures(args.figures, results) if args.figures else ():
            print(path)
    else:
        print(compare(load_results(args.run_a), load_results(args.run_b)))
    return 0
