"""The arena's training batches: byte-level token ids, random windows of a corpus's bytes
for causal language modelling (:func:`lm_batch`) and BERT-style masked language modelling
(:func:`masked_batch`).
"""

from __future__ import annotations

import torch

from ...config import check_int
from .tasks import IGNORE, TaskBatch

__all__ = [
    "MASKED_VOCAB",
    "MASK_ID",
    "VOCAB_SIZE",
    "lm_batch",
    "masked_batch",
]

VOCAB_SIZE = 256
"""Byte-level tokens: ids 0..255."""
MASK_ID = 256
"""The mask token of the bidirectional masked-LM experiment."""
MASKED_VOCAB = 257


def _check_tokens(tokens: torch.Tensor, length: int, extra: int) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point():
        raise ValueError("tokens must be a 1-D integer tensor of byte ids")
    if tokens.numel() < length + extra:
        raise ValueError(
            f"tokens has {tokens.numel()} ids, fewer than length + {extra} = {length + extra}"
        )


def _windows(
    tokens: torch.Tensor, batch_size: int, width: int, generator: torch.Generator
) -> torch.Tensor:
    """``batch_size`` windows of ``width`` ids at uniform starts in ``[0, n - width]``.

    Shapes:
        returns ``[batch_size, width]`` int64.
    """
    starts = torch.randint(0, tokens.numel() - width + 1, (batch_size, 1), generator=generator)
    return tokens[starts + torch.arange(width)].long()  # (B, 1) + (width,) -> (B, width)


def lm_batch(
    tokens: torch.Tensor, batch_size: int, length: int, generator: torch.Generator
) -> TaskBatch:
    """Causal language modelling: random windows of ``length + 1`` bytes (start uniform in
    ``[0, n - length - 1]``), inputs the first ``length``, targets the next byte of each.

    Shapes:
        tokens: ``[n]``; inputs, targets: ``[batch_size, length]`` int64.
    """
    check_int("batch_size", batch_size)
    check_int("length", length)
    _check_tokens(tokens, length, 1)
    window = _windows(tokens, batch_size, length + 1, generator)
    return TaskBatch(window[:, :-1].contiguous(), window[:, 1:].contiguous())


def masked_batch(
    tokens: torch.Tensor,
    batch_size: int,
    length: int,
    generator: torch.Generator,
    mask_prob: float = 0.15,
) -> TaskBatch:
    """BERT-style masked language modelling (Devlin et al. 2019) over windows of ``length``
    bytes: each position is masked with probability ``mask_prob`` (at least one per row);
    masked inputs are :data:`MASK_ID`, targets the original byte there and :data:`IGNORE`
    elsewhere.

    Shapes:
        tokens: ``[n]``; inputs, targets: ``[batch_size, length]`` int64.
    """
    check_int("batch_size", batch_size)
    check_int("length", length)
    if not isinstance(mask_prob, (int, float)) or not 0.0 < mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be in (0, 1], got {mask_prob!r}")
    _check_tokens(tokens, length, 0)
    window = _windows(tokens, batch_size, length, generator)
    mask = torch.rand(batch_size, length, generator=generator) < mask_prob
    # one forced position per row, drawn for every row so the generator advances the same way
    forced = torch.randint(0, length, (batch_size, 1), generator=generator)
    empty = ~mask.any(dim=1, keepdim=True)  # (B, 1)
    mask |= empty & (torch.arange(length) == forced)
    inputs = torch.where(mask, torch.full_like(window, MASK_ID), window)
    targets = torch.where(mask, window, torch.full_like(window, IGNORE))
    return TaskBatch(inputs, targets)
