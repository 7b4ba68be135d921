"""The arena: small models trained with every encoding on the same data, measured side by side.

``posenc arena run EXPERIMENT|all --preset quick|full`` (or :func:`run_arena`) trains
:class:`~posenc.models.TransformerLM` models and measures what the literature claims about
positional encodings: ``extrapolation`` (Press et al. 2022), ``layer-plans`` (per-layer
plans: NoPE every 4th layer, sliding-window RoPE with NoPE globals), ``context-extension``
(Chen et al. 2023; Peng et al. 2023), ``length-generalization`` (Kazemnejad et al. 2023),
``nope-needs-causality`` (Haviv et al. 2022) and ``lost-in-the-middle`` (Liu et al. 2023).
A run writes ``results.json``, ``results.csv`` and a self-contained ``report.html``, resumes
after a crash, and trains under ``torchrun`` with DistributedDataParallel unchanged.

The package is grouped by what its modules do: :mod:`.data` (corpus, batches, tasks),
:mod:`.running` (the run, its units, training, presets, processes, progress),
:mod:`.measuring` (evaluation, the shared language model, loading a run's trained models),
:mod:`.files` (atomic JSON writes, apart from the safetensors checkpoints),
:mod:`.experiments` (one file per experiment, and how to add one) and :mod:`.reporting`
(results, tables, figures, summary, report, comparison, and the reader the guide uses).
The names below are its public face.

Needs the ``posenc[arena]`` extra (safetensors, rich, matplotlib).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "EXPERIMENTS",
    "PRESETS",
    "Corpus",
    "CorpusError",
    "Measurements",
    "Preset",
    "get_preset",
    "load_corpus",
    "load_model",
    "read_measurements",
    "run_arena",
]

# Imported on first use, so that declaring the command line (``posenc --help``) needs none
# of the extras.
_WHERE = {
    "EXPERIMENTS": "experiments",
    "PRESETS": "running.presets",
    "Corpus": "data.corpus",
    "CorpusError": "data.corpus",
    "Measurements": "reporting.reading",
    "Preset": "running.presets",
    "get_preset": "running.presets",
    "load_corpus": "data.corpus",
    "load_model": "measuring.trained",
    "read_measurements": "reporting.reading",
    "run_arena": "running.launch",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
