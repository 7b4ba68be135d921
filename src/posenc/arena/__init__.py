"""The arena: small models trained with every encoding on the same data, measured side by side.

``posenc arena run EXPERIMENT|all --preset quick|full`` (or :func:`run_arena`) trains
:class:`~posenc.models.TransformerLM` models and measures what the literature claims about
positional encodings: ``extrapolation`` (Press et al. 2022), ``context-extension`` (Chen et
al. 2023; Peng et al. 2023), ``length-generalization`` (Kazemnejad et al. 2023),
``nope-needs-causality`` (Haviv et al. 2022) and ``lost-in-the-middle`` (Liu et al. 2023).
A run writes ``results.json``, ``results.csv`` and a self-contained ``report.html``, resumes
after a crash, and trains under ``torchrun`` with DistributedDataParallel unchanged.

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
    "Preset",
    "get_preset",
    "load_corpus",
    "run_arena",
]

# Imported on first use, so that declaring the command line (``posenc --help``) needs none
# of the extras.
_WHERE = {
    "EXPERIMENTS": "experiments",
    "PRESETS": "presets",
    "Corpus": "corpus",
    "CorpusError": "corpus",
    "Preset": "presets",
    "get_preset": "presets",
    "load_corpus": "corpus",
    "run_arena": "run",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
