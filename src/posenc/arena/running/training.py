"""The arena's training loop: deterministic per step, resumable bit for bit, DDP-aware.

The batch of step ``t`` is a pure function of ``(seed, t)``, and the learning rate a pure
function of ``t``, so a run killed after its checkpoint at step ``k`` and resumed from it
performs exactly the steps ``k..`` of an uninterrupted run: the same results, bitwise, on the
CPU. Checkpoints hold the weights (safetensors), the optimizer, the RNG state and the losses.

Recipe (AdamW, linear warm-up then cosine decay, gradient clipping, weight decay on matrices
only) as in Loshchilov & Hutter 2019 and nanoGPT; each preset sets the steps, batch and
learning rates (``presets.py``; how the quick one was chosen is in the README). Bitwise
resumption holds for the same torch thread count and corpus, which a run's configuration
records and a resume checks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...config import check_int
from ..data.tasks import IGNORE, TaskBatch
from .distributed import World, world
from .progress import Progress

__all__ = ["TrainConfig", "TrainResult", "learning_rate", "step_generator", "train_model"]


@dataclass(frozen=True)
class TrainConfig:
    """How to train one model.

    Args:
        steps: optimizer steps.
        batch_size: rows per step (the global batch, over every process).
        lr: peak learning rate.
        warmup_steps: steps of linear warm-up from 0 to ``lr``.
        min_lr_ratio: the cosine decay ends at ``lr * min_lr_ratio``.
        weight_decay: AdamW's decoupled weight decay, on weight matrices only.
        grad_clip: the largest global gradient norm (0: no clipping).
        checkpoint_every: steps between checkpoints, and one at the end (0: none; only the
            final weights are kept).
    """

    steps: int
    batch_size: int
    lr: float = 2e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            check_int(name, getattr(self, name), minimum=1)
        for name in ("warmup_steps", "checkpoint_every"):
            check_int(name, getattr(self, name), minimum=0)
        for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.lr == 0 or self.min_lr_ratio > 1:
            raise ValueError(
                f"lr must be > 0 and min_lr_ratio <= 1, got {self.lr} and {self.min_lr_ratio}"
            )


@dataclass
class TrainResult:
    """What a training run did: the loss of every step (nats per scored token), its time."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0
    resumed_from: int = 0

    @property
    def tokens_per_s(self) -> float:
        """Input tokens per second over the steps this process ran."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def learning_rate(step: int, config: TrainConfig) -> float:
    """The learning rate at ``step`` (0-based): linear warm-up, then cosine decay."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(config.steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator that draws the batch of ``step`` for ``seed``: a pure function of both,
    so a resumed run draws the same batches (seeds below 2**20 and steps below 2**40 never
    collide)."""
    return torch.Generator().manual_seed((seed << 40) + step)


def scored_loss(model: nn.Module, batch: TaskBatch, place: World | None = None) -> torch.Tensor:
    """Mean cross-entropy (nats) over the scored targets of the global batch, as this
    process's part of it.

    With several processes each holds some rows, and DistributedDataParallel averages the
    gradients over processes; so each returns its sum over scored targets times the number
    of processes, divided by the count of scored targets in the whole batch. The gradients
    are then those of the global mean even where processes score different numbers of
    targets (copy and reverse rows of different lengths, random masks). Alone, it is the
    plain mean.

    Shapes:
        ``batch.inputs``, ``batch.targets``: ``[batch, seq]``; returns a scalar.
    """
    extra = {} if batch.positions is None else {"positions": batch.positions}
    logits = model(batch.inputs, **extra)  # [batch, seq, vocab]
    targets = batch.targets.flatten()
    if place is None or place.size == 1:
        return F.cross_entropy(logits.flatten(0, 1), targets, ignore_index=IGNORE)
    total = F.cross_entropy(logits.flatten(0, 1), targets, ignore_index=IGNORE, reduction="sum")
    count = (targets != IGNORE).sum()
    return total * place.size / place.sum(count).clamp_min(1)


def _optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    matrices = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    others = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": matrices, "weight_decay": config.weight_decay}]
    if others:
        groups.append({"params": others, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95))


def train_model(
    model: nn.Module,
    make_batch: Callable[[torch.Generator], TaskBatch],
    config: TrainConfig,
    *,
    seed: int,
    checkpoint_dir: Path | None = None,
    label: str = "train",
    progress: Progress | None = None,
    place: World | None = None,
    autocast: torch.dtype | None = None,
) -> TrainResult:
    """Train ``model`` in place for ``config.steps`` steps, resuming from ``checkpoint_dir``.

    Args:
        model: the model (on ``place.device``); wrapped in DistributedDataParallel when
            ``place`` has several processes.
        make_batch: draws one global batch of ``config.batch_size`` rows from the generator
            it is given (:func:`step_generator` of the step); each process keeps its rows.
        config: the recipe.
        seed: seed of the batches.
        checkpoint_dir: where checkpoints go (rank 0 writes them; every rank reads them);
            None keeps none.
        label: the progress bar's description.
        progress: the run's progress bars (None: none).
        place: the processes (default: :func:`~posenc.arena.running.distributed.world`).
        autocast: a dtype to run the forward and the loss in under ``torch.autocast`` on the
            place's device (``torch.bfloat16``); None: float32 throughout. The weights, the
            gradients and the optimizer stay float32.

    Returns:
        the losses of every step (those before a resume come from the checkpoint), the time
        and tokens of the steps run here.
    """
    place = world() if place is None else place
    rows = place.rows(config.batch_size)
    optimizer = _optimizer(model, config)
    result = _resume(checkpoint_dir, model, optimizer)
    net: nn.Module = model
    if place.size > 1:
        net = nn.parallel.DistributedDataParallel(model)
    model.train()
    bar = (progress or Progress(bars=False, echo=False)).task(
        label, config.steps, completed=result.resumed_from
    )
    start = time.perf_counter()
    for step in range(result.resumed_from, config.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        batch = make_batch(step_generator(seed, step))
        local = batch.rows(rows, place.device)
        with torch.autocast(place.device.type, dtype=autocast, enabled=autocast is not None):
            loss = scored_loss(net, local, place)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        result.losses.append(place.mean(loss).item())
        result.tokens += batch.inputs.numel()
        bar.advance(1, tokens=batch.inputs.numel(), info=f"loss {result.losses[-1]:.3f}")
        done = step + 1
        if checkpoint_dir is not None and _checkpoint_due(done, config):
            if place.is_main:
                _save(checkpoint_dir, model, optimizer, done, result.losses)
            place.barrier()
    result.seconds = time.perf_counter() - start
    bar.close()
    model.eval()
    return result


def _checkpoint_due(done: int, config: TrainConfig) -> bool:
    """Whether a checkpoint is written after ``done`` steps: every ``checkpoint_every``
    steps and after the last one (never with ``checkpoint_every`` 0)."""
    every = config.checkpoint_every
    return bool(every) and (done % every == 0 or done == config.steps)


def _resume(
    checkpoint_dir: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer
) -> TrainResult:
    """A fresh :class:`TrainResult`, or, with a checkpoint in ``checkpoint_dir``, the one it
    saved: ``model``, ``optimizer`` and the RNG states restored, the losses so far and the
    step to go on from. (safetensors is imported only here and in :func:`_save`: a run
    that writes only JSON never loads it.)"""
    result = TrainResult()
    if checkpoint_dir is None:
        return result
    from ..files.checkpoints import load_checkpoint, set_rng_state

    state = load_checkpoint(checkpoint_dir, model)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        result.losses = list(state["losses"])
        result.resumed_from = int(state["step"])
    return result


def _save(
    checkpoint_dir: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    done: int,
    losses: list[float],
) -> None:
    """Write the checkpoint after ``done`` steps: weights, optimizer, RNG states, losses."""
    from ..files.checkpoints import rng_state, save_checkpoint

    state = {
        "step": done,
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(),
        "losses": losses,
    }
    save_checkpoint(checkpoint_dir, model, state)
