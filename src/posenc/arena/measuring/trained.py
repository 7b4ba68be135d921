"""The byte-level text models an arena run trained, loaded back from its run directory.

A run writes each trained model's weights to ``models/<unit>.safetensors`` and, last, its
unit ``units/<unit>.json`` (the marker that the training ended), where ``<unit>`` is
``train--<model>--<encoding>--seed<k>`` (:func:`~posenc.arena.running.context.unit_name`). The two
models of text are ``lm``, the causal language model of ``extrapolation`` (and
``context-extension`` and ``nope-needs-causality``), and ``mlm``, the bidirectional
masked model of ``nope-needs-causality``. :func:`load_model` rebuilds one from the run's
``run.json`` as the run built it and loads its weights (``posenc plot attention --run``
draws one: :func:`posenc.plot.attention.attention` of the loaded model).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ...models import TransformerLM
from ..data.batches import MASKED_VOCAB, VOCAB_SIZE
from ..files.atomic import read_json
from ..files.checkpoints import load_weights
from ..running.context import unit_name
from .language_model import encoding_spec

__all__ = ["TEXT_MODELS", "load_model", "trained_encodings"]

#: the text models of a run: name -> (vocabulary size, causal)
TEXT_MODELS: dict[str, tuple[int, bool]] = {
    "lm": (VOCAB_SIZE, True),
    "mlm": (MASKED_VOCAB, False),
}


def _check_model(model: str) -> tuple[int, bool]:
    if model not in TEXT_MODELS:
        raise ValueError(f"model must be one of {list(TEXT_MODELS)}, got {model!r}")
    return TEXT_MODELS[model]


def _run_config(run_dir: Path) -> dict:
    path = run_dir / "run.json"
    if not path.is_file():
        raise ValueError(
            f"run: {run_dir} is not an arena run directory (no run.json); "
            "`posenc arena run ... --out DIR` makes one"
        )
    config: dict = read_json(path)["config"]
    return config


def trained_encodings(run_dir: str | Path, model: str = "lm") -> dict[str, list[int]]:
    """The encodings whose ``model`` finished training in the run, with their seeds.

    Args:
        run_dir: the run directory.
        model: ``"lm"`` or ``"mlm"`` (see :data:`TEXT_MODELS`).

    Returns:
        ``{encoding: [seeds, ascending]}``, encodings in alphabetical order.
    """
    _check_model(model)
    found: dict[str, list[int]] = {}
    for unit in sorted((Path(run_dir) / "units").glob(f"train--{model}--*--seed*.json")):
        parts = unit.stem.split("--")  # train, model, encoding, seed<k>
        if len(parts) != 4 or not parts[3][4:].isdigit():
            continue
        found.setdefault(parts[2], []).append(int(parts[3][4:]))
    return {name: sorted(seeds) for name, seeds in sorted(found.items())}


def load_model(
    run_dir: str | Path, encoding: str, model: str = "lm", seed: int | None = None
) -> TransformerLM:
    """The trained text model with ``encoding`` from an arena run, in eval mode, on the CPU.

    Args:
        run_dir: the run directory (it holds ``run.json``).
        encoding: the encoding's registered name, e.g. ``"rope"``.
        model: ``"lm"`` (the causal language model) or ``"mlm"`` (the bidirectional masked
            one; only ``nope-needs-causality`` trains it).
        seed: the training seed; None for the run's first seed.

    Returns:
        The :class:`TransformerLM` as the run built it (the preset's size; ``learned``
        limited to the training length), with the trained weights.

    Raises:
        ValueError: for a directory that is not a run, an unknown ``model``, or a run with
            no finished model for ``encoding`` and ``seed`` (listing the encodings and seeds
            it has).
    """
    if not isinstance(run_dir, (str, os.PathLike)):
        raise ValueError(f"run must be a path to an arena run directory, got {run_dir!r}")
    run_dir = Path(run_dir)
    vocab, causal = _check_model(model)
    preset = _run_config(run_dir)["preset"]
    if seed is None:
        seed = int(preset["seeds"][0])
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int or None, got {seed!r}")
    have = trained_encodings(run_dir, model)
    if seed not in have.get(encoding, []):
        listed = ", ".join(f"{e} (seeds {s})" for e, s in have.items()) or "none"
        raise ValueError(
            f"encoding: the run {run_dir} has no trained {model!r} model for {encoding!r} "
            f"with seed {seed}; it has: {listed}"
        )
    name = unit_name("train", model, encoding, f"seed{seed}")
    size = preset["model"]
    spec = encoding_spec(encoding, preset["train_length"]) if model == "lm" else encoding
    with torch.random.fork_rng(devices=[]):  # the weights are replaced: leave the RNG be
        net = TransformerLM(
            vocab, size["dim"], size["n_layers"], size["n_heads"], encoding=spec, causal=causal
        )
    load_weights(run_dir / "models" / f"{name}.safetensors", net)
    return net.eval()
