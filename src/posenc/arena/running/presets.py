"""Presets: how big, how long and on what the arena trains (``--preset
quick|standard|full``).

``quick`` runs every experiment but ``lost-in-the-middle`` in about 8 minutes on 2 CPU cores
with its conclusions already visible (the demo); ``standard`` runs all of them with 3 seeds
(aimed at 45 minutes; the published run, ``docs/results/standard/``, took 78 on 2 cores
shared with other jobs); ``full`` is
the real run (3 seeds, longer training; hours, resumable, for a GPU); ``tiny`` is for the
tests (seconds). The quick sizes and steps were chosen by measuring
step times and what each experiment learns in them (README, "The arena").
``quick`` trains the synthetic tasks of ``length-generalization`` on strings of 1-5 symbols
and tests 6-10 (``standard`` and ``full``: Kazemnejad et al.'s 1-20 / 21-40), on five
encodings only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...config import check_int
from ...positions.samplers import SAMPLERS
from .training import TrainConfig

__all__ = ["PRESETS", "ModelSize", "Preset", "get_preset"]


@dataclass(frozen=True)
class ModelSize:
    """The shape of a :class:`~posenc.models.TransformerLM`."""

    dim: int
    n_layers: int
    n_heads: int


@dataclass(frozen=True)
class Preset:
    """Everything an arena run needs besides its corpus and directory.

    Args:
        name: the preset's name.
        seeds: one model per encoding and seed.
        encodings: the encodings trained (None: every registered encoding of 1-D token
            positions, see :func:`posenc.arena.running.context.arena_encodings`).
        corpus_bytes: the most bytes read from the corpus (None: all).
        model: the language model of ``extrapolation``, ``context-extension`` and
            ``nope-needs-causality``.
        train_length: L, the training length of the language model.
        lm: its training recipe.
        eval_factors: evaluation lengths as multiples of L.
        eval_tokens: predictions scored per length and mode (the same bytes every time).
        extension_factors: context-extension factors s.
        extension_scalings: RoPE scalings compared (``none`` is plain RoPE).
        finetune: the recipe of the short fine-tune at s·L (its batch is divided by s, so a
            step holds as many tokens as in pre-training).
        task_model: the model of the synthetic tasks.
        sequence_task: the recipe of ``length-generalization`` (copy and reverse).
        task_train_lengths: the range (inclusive) of training lengths.
        task_test_lengths: the range (inclusive) of test lengths.
        task_eval_rows: rows per test length.
        mlm: the recipe of the bidirectional masked language model.
        kv_model: the model of ``lost-in-the-middle``.
        kv_pairs: key-value pairs per training example of ``lost-in-the-middle``.
        kv_test_pairs: the numbers of pairs tested (the first is ``kv_pairs``).
        kv: the recipe of ``lost-in-the-middle``.
        kv_eval_rows: rows per gold position.
        task_encodings: the encodings of ``length-generalization`` and
            ``lost-in-the-middle`` (None: the run's encodings; else those of the run's
            encodings that are in this list).
        left_out: experiments that ``all`` does not run at this preset, each with why (one
            line printed instead); naming one runs it.
        samplers: position samplers ``length-generalization`` also trains each encoding
            with (:data:`posenc.positions.SAMPLERS`: ``randomized``, ``pose``; ``--positions``).
    """

    name: str
    seeds: tuple[int, ...]
    encodings: tuple[str, ...] | None
    corpus_bytes: int | None
    model: ModelSize
    train_length: int
    lm: TrainConfig
    eval_factors: tuple[int, ...]
    eval_tokens: int
    extension_factors: tuple[int, ...]
    extension_scalings: tuple[str, ...]
    finetune: TrainConfig
    task_model: ModelSize
    sequence_task: TrainConfig
    task_train_lengths: tuple[int, int]
    task_test_lengths: tuple[int, int]
    task_eval_rows: int
    mlm: TrainConfig
    kv_model: ModelSize
    kv_pairs: int
    kv_test_pairs: tuple[int, ...]
    kv: TrainConfig
    kv_eval_rows: int
    task_encodings: tuple[str, ...] | None = None
    left_out: tuple[tuple[str, str], ...] = ()
    samplers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.samplers) - set(SAMPLERS))
        if unknown or len(set(self.samplers)) != len(self.samplers):
            raise ValueError(
                f"samplers must be distinct names of {sorted(SAMPLERS)}, got {self.samplers}"
            )
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and at least one, got {self.seeds}")
        for seed in self.seeds:
            check_int("seed", seed, minimum=0, maximum=2**20 - 1)  # see train.step_generator
        for name in ("train_length", "eval_tokens", "task_eval_rows", "kv_pairs", "kv_eval_rows"):
            check_int(name, getattr(self, name))
        if not self.eval_factors or self.eval_factors[0] != 1:
            raise ValueError(f"eval_factors must start at 1 (L itself), got {self.eval_factors}")
        if not self.kv_test_pairs or self.kv_test_pairs[0] != self.kv_pairs:
            raise ValueError(
                f"kv_test_pairs must start with the trained kv_pairs ({self.kv_pairs}), "
                f"got {self.kv_test_pairs}"
            )
        for name in ("task_train_lengths", "task_test_lengths"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"{name} must be (low, high) with 1 <= low <= high")

    def to_dict(self) -> dict[str, Any]:
        """The preset as plain JSON values (written into ``run.json`` and ``results.json``)."""
        return dataclasses.asdict(self)


#: the encodings a quick run trains: every kind, each contrast the article draws, and two
#: that the field now compares against: stick-breaking attention (Tan et al. 2025), which
#: replaces the softmax, and PaTH (Yang et al. 2025), content-dependent Householder turns
CORE_ENCODINGS = (
    "nope",
    "sinusoidal",
    "learned",
    "rope",
    "xpos",
    "t5",
    "shaw",
    "alibi",
    "kerple",
    "fire",
    "stick_breaking",
    "path",
)

#: Kazemnejad et al.'s set of encodings, for the synthetic tasks of the quick and standard
#: runs, and stick-breaking attention and PaTH
TASK_ENCODINGS = ("nope", "sinusoidal", "rope", "alibi", "t5", "stick_breaking", "path")

#: key-value retrieval: every pair asked once per row (``train_queries``), batch 64, 2,000
#: steps at 1e-3 (at 3e-3, or with half the queries, no phase change in 2,000 steps)
KV_RECIPE = TrainConfig(steps=2000, batch_size=64, lr=1e-3, warmup_steps=100, checkpoint_every=500)

QUICK = Preset(
    name="quick",
    seeds=(0,),
    encodings=CORE_ENCODINGS,
    corpus_bytes=4_000_000,
    model=ModelSize(dim=64, n_layers=2, n_heads=4),
    train_length=64,
    lm=TrainConfig(steps=400, batch_size=16, lr=3e-3, warmup_steps=40, checkpoint_every=100),
    eval_factors=(1, 2, 4, 8, 16),
    eval_tokens=4096,
    extension_factors=(2, 4, 8),
    extension_scalings=("none", "linear", "ntk", "dynamic", "yarn"),
    finetune=TrainConfig(steps=20, batch_size=16, lr=1e-3, warmup_steps=2, checkpoint_every=0),
    task_model=ModelSize(dim=32, n_layers=2, n_heads=4),
    # shorter strings than the 1-20 / 21-40 (full): copy is learnt in 600 steps at 1-5
    sequence_task=TrainConfig(steps=600, batch_size=32, lr=1e-2, warmup_steps=60),
    task_train_lengths=(1, 5),
    task_test_lengths=(6, 10),
    task_eval_rows=64,
    mlm=TrainConfig(steps=400, batch_size=16, lr=3e-3, warmup_steps=40),
    kv_model=ModelSize(dim=64, n_layers=2, n_heads=4),
    kv_pairs=8,
    kv_test_pairs=(8, 16, 32),
    # retrieval is an induction circuit, learnt in a phase change near step 1,000 of these
    # (docs/arena.md, "The model"): too long for the demo, so ``all`` leaves it out
    kv=KV_RECIPE,
    kv_eval_rows=32,
    # Kazemnejad et al.'s set, for time
    task_encodings=TASK_ENCODINGS,
    left_out=(
        (
            "lost-in-the-middle",
            "retrieval is learnt after about 1,000 steps of batch 64, some 11 minutes for its "
            "seven encodings on 2 cores: `posenc arena run lost-in-the-middle` runs it, and the "
            "standard preset's results are in docs/results/standard/",
        ),
    ),
)

#: quick's sizes and recipes, three seeds, every experiment, and Kazemnejad et al.'s lengths
#: (its language model three times: a third layer or 600 steps put the run past 45 minutes)
STANDARD = dataclasses.replace(
    QUICK,
    name="standard",
    seeds=(0, 1, 2),
    sequence_task=TrainConfig(steps=800, batch_size=32, lr=1e-2, warmup_steps=80),
    task_train_lengths=(1, 20),
    task_test_lengths=(21, 40),
    kv_eval_rows=64,
    left_out=(),
)

FULL = Preset(
    name="full",
    seeds=(0, 1, 2),
    encodings=None,
    corpus_bytes=None,
    model=ModelSize(dim=128, n_layers=3, n_heads=4),
    train_length=64,
    lm=TrainConfig(steps=3000, batch_size=32, lr=2e-3, warmup_steps=200, checkpoint_every=250),
    eval_factors=(1, 2, 4, 8, 16),
    eval_tokens=65536,
    extension_factors=(2, 4, 8),
    extension_scalings=("none", "linear", "ntk", "dynamic", "yarn"),
    finetune=TrainConfig(steps=100, batch_size=32, lr=5e-4, warmup_steps=10),
    task_model=ModelSize(dim=128, n_layers=3, n_heads=4),
    sequence_task=TrainConfig(steps=3000, batch_size=64, lr=1e-3, warmup_steps=200),
    task_train_lengths=(1, 20),
    task_test_lengths=(21, 40),
    task_eval_rows=256,
    mlm=TrainConfig(steps=3000, batch_size=32, lr=2e-3, warmup_steps=200, checkpoint_every=250),
    kv_model=ModelSize(dim=128, n_layers=3, n_heads=4),
    kv_pairs=16,
    kv_test_pairs=(16, 32, 64),
    kv=TrainConfig(steps=3000, batch_size=64, lr=1e-3, warmup_steps=200, checkpoint_every=250),
    kv_eval_rows=256,
)

TINY = Preset(
    name="tiny",
    seeds=(0,),
    encodings=("nope", "sinusoidal", "learned", "rope", "alibi"),
    corpus_bytes=200_000,
    model=ModelSize(dim=16, n_layers=1, n_heads=2),
    train_length=16,
    lm=TrainConfig(steps=6, batch_size=4, warmup_steps=2, checkpoint_every=3),
    eval_factors=(1, 2),
    eval_tokens=64,
    extension_factors=(2,),
    extension_scalings=("none", "linear", "yarn"),
    finetune=TrainConfig(steps=2, batch_size=4, warmup_steps=1, checkpoint_every=0),
    task_model=ModelSize(dim=16, n_layers=1, n_heads=2),
    sequence_task=TrainConfig(steps=4, batch_size=4, warmup_steps=1, checkpoint_every=2),
    task_train_lengths=(1, 4),
    task_test_lengths=(5, 6),
    task_eval_rows=4,
    mlm=TrainConfig(steps=4, batch_size=4, warmup_steps=1, checkpoint_every=2),
    kv_model=ModelSize(dim=16, n_layers=1, n_heads=2),
    kv_pairs=3,
    kv_test_pairs=(3, 8),
    kv=TrainConfig(steps=4, batch_size=4, warmup_steps=1, checkpoint_every=2),
    kv_eval_rows=4,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (QUICK, STANDARD, FULL, TINY)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]
