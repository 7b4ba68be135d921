"""``posenc arena run``: run experiments into a run directory, then write the results, the
report and the table.

A run directory holds everything needed to reproduce it: ``run.json`` (the command, the
configuration, the versions), the units, the checkpoints and models, ``results.json``,
``results.csv`` and ``report.html``. Running again into the same directory needs
``resume=True`` and the same configuration; finished units are then loaded, not recomputed.
``threads`` (``--threads``) sets torch's intra-op threads for the run (:mod:`.threads`); it
is part of the configuration, and a resumed run takes the recorded count unless given one.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..experiments import EXPERIMENTS, get
from ..files.atomic import atomic_write_json, read_json
from ..reporting.panels import table
from ..reporting.report import write_report
from ..reporting.results import machine, make_results, versions, write_results
from .context import RunContext, check_encodings, command_line
from .distributed import World, world
from .presets import Preset, get_preset
from .progress import Progress
from .threads import KEY, check_threads, recorded_threads, using_threads

__all__ = ["default_run_dir", "experiment_names", "run_arena"]


def experiment_names(requested: Sequence[str], left_out: Sequence[str] = ()) -> list[str]:
    """The experiments to run, in report order: ``["all"]`` means every one but those in
    ``left_out`` (a preset's :attr:`~.presets.Preset.left_out`); a named one always runs.

    Raises:
        ValueError: for an unknown name (listing the known ones) or none at all.
    """
    if not requested:
        raise ValueError(f"name an experiment: one or more of {[*EXPERIMENTS, 'all']}")
    if "all" in requested:
        return [name for name in EXPERIMENTS if name not in left_out]
    for name in requested:
        get(name)  # raises for an unknown name
    return [name for name in EXPERIMENTS if name in requested]


def default_run_dir(preset: str, place: World) -> Path:
    """``runs/arena-<preset>-<date>-<time>`` (the same on every process)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if place.size > 1:
        import torch.distributed as dist

        box = [stamp]
        dist.broadcast_object_list(box, src=0)
        stamp = box[0]
    return Path("runs") / f"arena-{preset}-{stamp}"


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """The dotted keys where two JSON configurations differ (``preset.seeds``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for key in sorted({*a, *b})
            for d in _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        ]
    return [] if a == b else [prefix.rstrip(".")]


def _start(
    run_dir: Path, config: dict[str, Any], names: list[str], resume: bool
) -> tuple[list[str], str]:
    """Check ``run_dir`` against this run; return every experiment it holds and when the run
    first started."""
    path = run_dir / "run.json"
    if not path.exists():
        return names, time.strftime("%Y-%m-%d %H:%M:%S %Z")
    if not resume:
        raise ValueError(
            f"{run_dir} already holds a run: pass --resume to continue it, or another --out"
        )
    before = read_json(path)
    if before["config"] != config:
        differences = _differences(before["config"], config)
        threads = (
            f"; it ran with --threads {before['config'][KEY]}, this try with {config[KEY]}"
            if KEY in differences
            else ""
        )
        raise ValueError(
            f"{run_dir} was started with another configuration ({', '.join(differences)} "
            f"differ{threads}); resume it with the same options, or choose another --out"
        )
    return [n for n in EXPERIMENTS if n in names or n in before["experiments"]], before["started"]


def run_arena(
    experiments: Sequence[str],
    preset: str | Preset = "quick",
    *,
    corpus: str | Path | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    seeds: Sequence[int] | None = None,
    encodings: Sequence[str] | None = None,
    hf_model: str | Path | None = None,
    bars: bool = True,
    device: str = "auto",
    bf16: bool = False,
    samplers: Sequence[str] | None = None,
    threads: int | None = None,
    records: bool = False,
) -> Path:
    """Run ``experiments`` (names, or ``["all"]``) and write results, report and table.

    Args:
        experiments: experiment names, keys of :data:`~posenc.arena.experiments.EXPERIMENTS`.
        preset: ``"quick"``, ``"standard"``, ``"full"``, ``"tiny"`` or a :class:`Preset`.
        corpus: a text file or folder (None: the Python standard library).
        out: the run directory (default: ``runs/arena-<preset>-<time>``).
        resume: continue the run in ``out`` (finished units are loaded, an unfinished
            training continues from its last checkpoint).
        seeds: replace the preset's seeds.
        encodings: replace the preset's encodings (1-D ones; checked before any training).
        hf_model: a local Hugging Face causal LM directory for the lost-in-the-middle probe.
        bars: draw progress bars.
        device: ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``, chosen once for the
            whole run (:func:`~.distributed.world`).
        bf16: train under bfloat16 autocast.
        samplers: replace the preset's position samplers (``length-generalization`` trains
            each encoding with each too: ``randomized``, ``pose``).
        threads: torch's intra-op threads for the run, restored after it (``--threads``;
            None: as they are, or on ``resume`` the count the run was started with). Two
            runs at once on one machine should split its cores between them.
        records: write the run's progress as JSON records on stdout, one per line
            (``--json``: ``start``, a ``unit`` per unit done, ``end``; each with ``done``
            of ``total`` units, ``elapsed_s`` and ``left_s``); the lines for a person, the
            table included, then go to stderr.

    Returns:
        the run directory.
    """
    check_threads(threads)
    chosen = get_preset(preset) if isinstance(preset, str) else preset
    left_out = dict(chosen.left_out) if "all" in experiments else {}
    names = experiment_names(experiments, tuple(left_out))
    if seeds is not None:
        chosen = dataclasses.replace(chosen, seeds=tuple(seeds))
    if samplers is not None:
        chosen = dataclasses.replace(chosen, samplers=tuple(samplers))
    if encodings is not None:
        check_encodings(encodings)
        # the synthetic tasks too run every encoding named (context-extension always adds
        # rope, nope-needs-causality nope, sinusoidal and rope: the encodings they compare)
        chosen = dataclasses.replace(chosen, encodings=tuple(encodings), task_encodings=None)
    place = world(device)
    if resume and out is None:
        raise ValueError("--resume continues the run in --out: name its directory")
    run_dir = Path(out) if out is not None else default_run_dir(chosen.name, place)
    if threads is None and resume:
        threads = recorded_threads(run_dir)  # a resumed run keeps its thread count
    with using_threads(threads):
        with Progress(bars=bars, echo=place.is_main, records=records) as progress:
            ctx = RunContext(chosen, run_dir, corpus, progress, hf_model, place, bf16=bf16)
            config = ctx.config()
            names, started = _start(run_dir, config, names, resume)
            place.barrier()  # every process has checked run.json before rank 0 writes it
            if place.is_main:
                atomic_write_json(
                    run_dir / "run.json",
                    {
                        "command": command_line(),
                        "config": config,
                        "experiments": names,
                        "started": started,
                        "versions": versions(),
                        "machine": machine(),
                    },
                )
            place.barrier()
            for name, why in left_out.items():
                progress.print(f"{name}: not in the {chosen.name} preset's `all`: {why}")
            total = sum(len(ctx.units_of(get(name).run)) for name in names)
            progress.start_units(total, run_dir=str(run_dir), experiments=names)
            start = time.perf_counter()
            for name in names:
                progress.print(f"== {name}")
                get(name).run(ctx)
            seconds = time.perf_counter() - start
        results = make_results(config, command_line(), names, ctx.measurements, ctx.timings)
        results["started"] = started
        results["seconds"] = round(seconds, 1)  # of this try; a resumed run counts only its own
        if place.is_main:
            write_results(run_dir, results)
            report = write_report(run_dir, results)
            human = sys.stderr if records else sys.stdout  # stdout holds the records
            print(table(results), file=human, flush=True)
            print(
                f"\nreport: {report}\nresults: {run_dir / 'results.json'}", file=human, flush=True
            )
            progress.end_units(report=str(report), results=str(run_dir / "results.json"))
        place.barrier()
    return run_dir
