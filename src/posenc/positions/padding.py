"""Positions and masks of padded and packed batches.

Positions set the encoding and the causal mask (``k_position <= q_position``) only; padding
and packed documents have masks of their own (``key_padding_mask`` and ``segment_ids`` in
:func:`posenc.attention`). :func:`from_padding` and :func:`from_segments` give their
positions: each prompt or document gets the positions it has alone, as in Hugging Face's
batched generation and in packed training.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from ..arguments import check_str
from ..host_reads import read, reads_values

__all__ = [
    "check_padding_mask",
    "check_segment_ids",
    "document_starts",
    "from_padding",
    "from_segments",
]


def check_padding_mask(mask: Any, name: str = "attention_mask") -> torch.Tensor:
    """Validate a ``[batch, seq]`` padding mask (True or 1 = a real token, False or 0 = a
    pad, Hugging Face's ``attention_mask``) and return it as bool."""
    check_str("name", name)
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"{name} must be a bool or integer (0/1) tensor, got {mask.dtype}")
    if mask.dim() != 2:
        raise ValueError(f"{name} must be [batch, seq], got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if reads_values(mask):
        read(((mask != 0) & (mask != 1)).any().view(1), partial(_check_binary, name))
    return mask != 0


def _check_binary(name: str, values: list[int]) -> None:
    if values[0]:
        raise ValueError(f"{name} must hold only 0 (pad) and 1 (real token)")


def check_segment_ids(segment_ids: Any, name: str = "segment_ids") -> torch.Tensor:
    """Validate ``[batch, seq]`` integer document ids and return them unchanged."""
    check_str("name", name)
    if not isinstance(segment_ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(segment_ids).__name__}")
    if (
        segment_ids.is_floating_point()
        or segment_ids.is_complex()
        or segment_ids.dtype == (torch.bool)
    ):
        raise TypeError(f"{name} must be an integer tensor, got {segment_ids.dtype}")
    if segment_ids.dim() != 2:
        raise ValueError(f"{name} must be [batch, seq], got shape {tuple(segment_ids.shape)}")
    return segment_ids


def from_padding(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that count real tokens only: ``cumsum(mask) - 1``, pads at 0.

    A left-padded row ``[pad, pad, a, b, c]`` gets ``[0, 0, 0, 1, 2]``, so each prompt has
    the positions it has alone (Hugging Face's convention for batched generation). Pads get
    0; they must also be masked as keys (``key_padding_mask``), which this does not do.

    Shapes:
        attention_mask ``[batch, seq]`` (bool, or 0/1 integers) -> ``[batch, seq]`` int64.

    Example:
        >>> from_padding(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])).tolist()
        [[0, 0, 0, 1, 2], [0, 1, 2, 3, 0]]
    """
    mask = check_padding_mask(attention_mask)
    return (mask.long().cumsum(-1) - 1).masked_fill(~mask, 0)


def from_segments(
    segment_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Positions that restart at 0 in every packed document.

    A document is a run of equal ids; an id may not reappear after another one in the same
    row (the mask compares ids, so that would join two documents). With ``attention_mask``
    only real tokens are counted and pads get 0, as in :func:`from_padding`. Each document
    then gets exactly the positions it has alone, so a packed batch gives it the result it
    gets alone (with the segment mask of :func:`posenc.attention`).

    Shapes:
        segment_ids ``[batch, seq]`` integers; attention_mask ``[batch, seq]`` ->
        ``[batch, seq]`` int64.

    Example:
        >>> from_segments(torch.tensor([[0, 0, 0, 1, 1, 2]])).tolist()
        [[0, 1, 2, 0, 1, 0]]
    """
    ids = check_segment_ids(segment_ids)
    if attention_mask is None:
        real = torch.ones_like(ids, dtype=torch.long)
    else:
        real = check_padding_mask(attention_mask).long()
        if real.shape != ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(real.shape)} but segment_ids "
                f"{tuple(ids.shape)}: they must match"
            )
        if real.device != ids.device:
            raise ValueError(
                f"attention_mask is on {real.device} but segment_ids on {ids.device}: move "
                "one of them"
            )
    seq = ids.shape[-1]
    starts = document_starts(ids)
    index = torch.arange(seq, device=ids.device).expand_as(ids)
    start = torch.where(starts, index, 0).cummax(dim=-1).values  # [b, seq]: document start
    before = real.cumsum(-1) - real  # [b, seq]: real tokens before each token in its row
    positions = before - before.gather(-1, start)
    return positions.masked_fill(real == 0, 0)


def document_starts(segment_ids: torch.Tensor) -> torch.Tensor:
    """True where a packed document starts, after checking that every document is one run
    of equal ids: an id that reappears after another would join two documents in the
    segment mask, and under positions that restart per document, let a token see a later
    one of the same id. The check reads the ids (skipped under compile and on meta).

    Shapes:
        segment_ids ``[batch, seq]`` integers -> ``[batch, seq]`` bool.
    """
    ids = check_segment_ids(segment_ids)
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    if reads_values(ids) and ids.shape[-1] > 1:
        distinct = (ids.sort(dim=-1).values.diff(dim=-1) != 0).sum(-1) + 1
        read((starts.sum(-1) != distinct).any().view(1), _check_runs)
    return starts


def _check_runs(values: list[int]) -> None:
    if values[0]:
        raise ValueError(
            "segment_ids: an id reappears after another one in the same row; give each "
            "packed document its own id (a run of equal ids, e.g. 0, 0, 1, 1, 1, 2)"
        )
