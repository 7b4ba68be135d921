"""Measuring a trained model: perplexity and bits per byte at a length, accuracy on a task.

Language modelling is scored two ways (Press et al. 2022, "Train Short, Test Long", §4):

- ``chunks``: the text cut into non-overlapping windows of the evaluation length, every token
  scored with the context its window gives it (early tokens of a window see little);
- ``sliding``: windows of the evaluation length that advance by ``stride`` tokens, scoring only
  their last ``stride`` tokens, so every scored token sees a full window of context.

Both modes score the same bytes (``region``), whatever the length, so numbers at different
lengths and in different modes compare like with like.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..data.tasks import IGNORE, TaskBatch
from ..running.progress import Task

__all__ = [
    "MODES",
    "bits_per_byte",
    "lm_loss",
    "perplexity",
    "task_accuracies",
    "task_accuracy",
    "windows",
]

MODES = ("chunks", "sliding")


def windows(
    n_tokens: int, length: int, mode: str, *, stride: int, start: int = 0
) -> Iterator[tuple[int, int]]:
    """The ``(first, scored)`` windows that score the predictions made at the tokens
    ``start .. start + n_tokens`` (each predicting the token after it): a window's inputs are
    the tokens from ``first`` (``scored`` of them for a chunk, ``length`` for a sliding
    window) and its last ``scored`` predictions count.

    Args:
        n_tokens: how many tokens are scored in all.
        length: the evaluation length (tokens per window).
        mode: ``"chunks"`` or ``"sliding"``.
        stride: tokens scored per sliding window (the training length, in Press et al.).
        start: the first scored token; a sliding window needs ``start >= length - stride``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    step = length if mode == "chunks" else stride
    for scored_first in range(start, start + n_tokens, step):
        scored = min(step, start + n_tokens - scored_first)
        # a chunk starts at its first scored token; a sliding window ends at its last one
        first = scored_first if mode == "chunks" else scored_first + scored - length
        if first < 0:
            raise ValueError(
                f"start ({start}) leaves a sliding window of length {length} no room: it needs "
                f"{length - scored} tokens of context"
            )
        yield first, scored


@torch.no_grad()
def lm_loss(
    model: nn.Module,
    tokens: torch.Tensor,
    length: int,
    mode: str,
    *,
    n_tokens: int,
    stride: int,
    start: int,
    batch_size: int = 16,
    bar: Task | None = None,
) -> float:
    """Mean next-token cross-entropy (nats per token) of ``model`` over the tokens
    ``start .. start + n_tokens`` of ``tokens``, read in windows of ``length`` (see
    :func:`windows`).

    Shapes:
        tokens: ``[n]`` token ids (uint8 bytes or int64).

    Raises:
        ValueError: when ``tokens`` is too short for the windows.
        PositionOutOfRangeError: from an encoding that cannot reach ``length`` (``learned``).
    """
    if start + n_tokens + 1 > tokens.numel():
        raise ValueError(
            f"the text has {tokens.numel()} tokens; scoring {n_tokens} from {start} needs "
            f"{start + n_tokens + 1}"
        )
    device = next(model.parameters()).device
    spans = list(windows(n_tokens, length, mode, stride=stride, start=start))
    total, count = 0.0, 0
    for i in range(0, len(spans), batch_size):
        group = spans[i : i + batch_size]
        # full windows only in a batch; a short last chunk is scored alone
        for same in _same_size(group):
            rows = torch.stack([tokens[f : f + _span(length, mode, s) + 1] for f, s in same])
            rows = rows.to(device=device, dtype=torch.long)  # [b, span + 1]
            logits = model(rows[:, :-1])  # [b, span, vocab]
            scored = same[0][1]
            nll = F.cross_entropy(
                logits[:, -scored:].flatten(0, 1), rows[:, -scored:].flatten(), reduction="sum"
            )
            total += nll.item()
            count += scored * len(same)
            if bar is not None:
                bar.advance(len(same), tokens=rows[:, :-1].numel())
    return total / count


def _span(length: int, mode: str, scored: int) -> int:
    # a chunk is as long as what it scores; a sliding window is always `length` long
    return scored if mode == "chunks" else length


def _same_size(group: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``group``'s windows by how many tokens they score (the rows of one batch)."""
    sizes: dict[int, list[tuple[int, int]]] = {}
    for first, scored in group:
        sizes.setdefault(scored, []).append((first, scored))
    return list(sizes.values())


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a loss in nats per token."""
    return math.exp(loss)


def bits_per_byte(loss: float) -> float:
    """A loss in nats per byte-level token, in bits per byte."""
    return loss / math.log(2)


@torch.no_grad()
def task_accuracies(model: nn.Module, batch: TaskBatch) -> tuple[float, float]:
    """Exact match and per-token accuracy of ``model`` on ``batch``, from one forward pass
    with teacher forcing.

    Exact match is the fraction of rows whose every scored target is the model's most likely
    token (for greedy decoding the same test: a row is right only if each step is); per-token
    accuracy is the fraction of all scored targets that are.

    Shapes:
        ``batch.inputs``, ``batch.targets``: ``[batch, seq]``.
    """
    device = next(model.parameters()).device
    targets = batch.targets.to(device)
    scored = targets != IGNORE
    extra = {} if batch.positions is None else {"positions": batch.positions.to(device)}
    hit = model(batch.inputs.to(device), **extra).argmax(-1) == targets  # [batch, seq]
    exact = (hit | ~scored).all(dim=1).float().mean().item()
    return exact, ((hit & scored).sum() / scored.sum()).item()


def task_accuracy(model: nn.Module, batch: TaskBatch) -> float:
    """Exact match only (see :func:`task_accuracies`)."""
    return task_accuracies(model, batch)[0]
