"""An arena run: its directory, the units it is made of, and resuming it.

A run is a sequence of units, each written to ``units/<name>.json`` when it ends: a trained
model (``train-*``: its weights go to ``models/``, its timing to the unit) or the
measurements of one experiment, encoding and seed. A resumed run loads the units that ended
and re-enters the one that did not at its last checkpoint, so a run killed at any moment
ends with the results an uninterrupted one gives. Only rank 0 writes; every file is written
atomically.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ... import registry
from ...models import LayerPlan, TransformerLM
from ..data.corpus import Corpus, load_corpus
from ..data.tasks import TaskBatch
from ..files.atomic import atomic_write_json, read_json
from .distributed import World, world
from .presets import ModelSize, Preset
from .progress import Progress
from .training import TrainConfig, train_model

__all__ = ["NOT_FOR_TEXT", "RunContext", "arena_encodings", "check_encodings", "unit_name"]

#: registered 1-D encodings the arena does not train on text, and why
NOT_FOR_TEXT = {
    "calendar": "encodes unix timestamps, not token positions",
    "timestamp": "encodes real-valued times, not token positions",
    "time2vec": "encodes real-valued times, not token positions",
    "mrope": "on text alone it is rope",
}


def check_encodings(names: Sequence[str]) -> None:
    """Raise ``ValueError`` for a name the arena cannot train on text (unknown, an encoding
    of image-grid coordinates or of times), before minutes of training rather than after."""
    if not names:
        raise ValueError("encodings must name at least one encoding")
    for name in names:
        if registry.get(name).position_axes != 1:  # raises for an unknown name
            raise ValueError(
                f"{name!r} encodes image-grid coordinates: the arena trains text models, "
                "so choose an encoding of 1-D positions"
            )
        if name in NOT_FOR_TEXT:
            raise ValueError(f"{name!r} {NOT_FOR_TEXT[name]}: the arena trains text models")


def arena_encodings(preset: Preset) -> list[str]:
    """The encodings ``preset`` trains: its list, or every registered encoding of 1-D token
    positions (so an encoding registered later joins the arena by itself)."""
    if preset.encodings is not None:
        return list(preset.encodings)
    return [
        name
        for name in registry.available()
        if registry.get(name).position_axes == 1 and name not in NOT_FOR_TEXT
    ]


def unit_name(*parts: object) -> str:
    """A unit's file-safe name: its parts joined by ``--`` (``extrapolation--rope--seed0``)."""
    name = "--".join(str(p) for p in parts)
    if not re.fullmatch(r"[A-Za-z0-9_.:+\-]+", name):
        raise ValueError(f"unit name {name!r} has characters unsafe in a file name")
    return name


class RunContext:
    """What an experiment needs: the preset, the corpus, models trained once, and units.

    Args:
        preset: sizes and budgets.
        run_dir: the run directory (created).
        corpus: ``--corpus`` (None: the Python standard library).
        progress: the progress bars and printed lines.
        hf_model: ``--hf-model``, a local Hugging Face causal LM directory, or None.
        place: the processes (default: :func:`~posenc.arena.running.distributed.world`).
        bf16: train under bfloat16 autocast (``--bf16``; the evaluations stay float32).
    """

    def __init__(
        self,
        preset: Preset,
        run_dir: Path,
        corpus: str | Path | None = None,
        progress: Progress | None = None,
        hf_model: str | Path | None = None,
        place: World | None = None,
        bf16: bool = False,
    ) -> None:
        if not isinstance(bf16, bool):
            raise TypeError(f"bf16 must be a bool, got {type(bf16).__name__}")
        self.preset = preset
        self.bf16 = bf16
        self.run_dir = Path(run_dir)
        self.corpus_path = corpus
        self.hf_model = None if hf_model is None else Path(hf_model)
        self.place = world() if place is None else place
        self.progress = progress or Progress(bars=False, echo=False)
        self.measurements: list[dict[str, Any]] = []
        self.timings: dict[str, dict[str, float]] = {}
        self._planned: list[str] | None = None  # while :meth:`units_of` lists units

    @functools.cached_property
    def corpus(self) -> Corpus:
        """The corpus, read on first use."""
        return load_corpus(self.corpus_path, max_bytes=self.preset.corpus_bytes)

    def encodings(self) -> list[str]:
        """The encodings this run trains."""
        return arena_encodings(self.preset)

    def task_encodings(self) -> list[str]:
        """The encodings of the synthetic-task experiments: the run's encodings, less those
        not in the preset's ``task_encodings`` when it has that list."""
        keep = self.preset.task_encodings
        return [e for e in self.encodings() if keep is None or e in keep]

    def print(self, line: str) -> None:
        """Print ``line`` (rank 0 only; not while :meth:`units_of` lists units)."""
        if self._planned is None:
            self.progress.print(line)

    # -- units -----------------------------------------------------------------------------

    def _unit_path(self, name: str) -> Path:
        return self.run_dir / "units" / f"{name}.json"

    def units_of(self, run: Callable[[RunContext], None]) -> list[str]:
        """The names of the units an experiment's ``run(ctx)`` adds, in order, without
        computing, loading or printing anything (the run's count of units done of total):
        while it lists them, :meth:`unit` only notes each name and returns no records, so
        a ``run`` enumerates its units and leaves the measuring to their ``compute``."""
        self._planned = []
        try:
            run(self)
            return self._planned
        finally:
            self._planned = None

    def unit(self, name: str, compute: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The measurements of unit ``name``: loaded when it ended in an earlier try of this
        run, else computed by ``compute()`` and saved. They join :attr:`measurements`, and
        the timings of the models trained for them join :attr:`timings`; the run's count of
        units (:meth:`~.progress.Progress.unit_done`) moves by one."""
        if self._planned is not None:
            self._planned.append(name)
            return []
        path = self._unit_path(name)
        loaded = self.place.main_says(path.exists())  # every process takes the same branch
        if loaded:
            saved = read_json(path)
            records = list(saved["measurements"])
            self.timings.update(saved["timings"])
        else:
            before = set(self.timings)
            records = compute()
            timings = {k: v for k, v in self.timings.items() if k not in before}
            self._write(path, {"measurements": records, "timings": timings})
        self.measurements.extend(records)
        self.progress.unit_done(name, loaded=loaded)
        return records

    def _write(self, path: Path, obj: Any) -> None:
        if self.place.is_main:
            atomic_write_json(path, obj)
        self.place.barrier()

    # -- models ----------------------------------------------------------------------------

    def new_model(
        self,
        size: ModelSize,
        encoding: str | Mapping[str, Any] | LayerPlan,
        seed: int,
        vocab_size: int,
        causal: bool = True,
    ) -> TransformerLM:
        """A fresh :class:`TransformerLM` initialised from ``seed`` (global RNG untouched):
        ``encoding`` in every layer, or, given a :class:`~posenc.models.LayerPlan` of
        ``size.n_layers`` layers, that plan."""
        plan, spec = (encoding, None) if isinstance(encoding, LayerPlan) else (None, encoding)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = TransformerLM(
                vocab_size,
                size.dim,
                size.n_layers,
                size.n_heads,
                encoding=spec,
                causal=causal,
                plan=plan,
            )
        return model.to(self.place.device)

    def trained(
        self,
        name: str,
        model: TransformerLM,
        make_batch: Callable[[torch.Generator], TaskBatch],
        config: TrainConfig,
        seed: int,
    ) -> TransformerLM:
        """``model`` trained by unit ``name`` (``train--...``): its weights are loaded when the
        unit ended in an earlier try, else it trains (from its last checkpoint, if any) and
        its weights and timing are saved. The timing joins :attr:`timings`."""
        from ..files.checkpoints import load_weights, save_weights  # safetensors: only here

        path = self._unit_path(name)
        weights = self.run_dir / "models" / f"{name}.safetensors"
        if self.place.main_says(path.exists()):
            load_weights(weights, model)
            timing = read_json(path)["timing"]
        else:
            result = train_model(
                model,
                make_batch,
                config,
                seed=seed,
                checkpoint_dir=self.run_dir / "checkpoints" / name,
                label=name.removeprefix("train--"),
                progress=self.progress,
                place=self.place,
                autocast=torch.bfloat16 if self.bf16 else None,
            )
            timing = {
                "seconds": round(result.seconds, 3),
                "tokens_per_s": round(result.tokens_per_s, 1),
                "steps": config.steps,
                "resumed_from": result.resumed_from,
                "final_loss": result.losses[-1] if result.losses else None,
            }
            if self.place.is_main:
                save_weights(weights, model)
            self._write(path, {"timing": timing, "losses": result.losses})
            self.print(
                f"  trained {name.removeprefix('train--')}: loss {timing['final_loss']:.3f}, "
                f"{timing['tokens_per_s']:,.0f} tokens/s"
            )
        self.timings[name.removeprefix("train--")] = timing
        model.eval()
        return model

    def config(self) -> dict[str, Any]:
        """The run's configuration as plain JSON values (tuples become lists, as read back)."""
        config = {
            "preset": self.preset.to_dict(),
            "corpus": None if self.corpus_path is None else str(self.corpus_path),
            "hf_model": None if self.hf_model is None else str(self.hf_model),
            "world_size": self.place.size,
            "device": self.place.device.type,
            "bf16": self.bf16,
            # what else decides the numbers bit for bit: a resume must match them
            "torch_threads": torch.get_num_threads(),
            "corpus_sha256": self.corpus.sha256(),
        }
        return json.loads(json.dumps(config))


def command_line() -> list[str]:
    """The command that started this process, runnable again (kept in the run directory):
    ``posenc ...`` for the script and ``python -m posenc``, else the program as given."""
    program = Path(sys.argv[0])
    if program.name == "__main__.py" and program.parent.name == "posenc":
        return ["python", "-m", "posenc", *sys.argv[1:]]
    return [program.name, *sys.argv[1:]]
