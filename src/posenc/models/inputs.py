"""The checks on what :class:`~posenc.models.TransformerLM` is given: token ids and the
padding and document masks over the cached tokens and the new ones.

Each raises a ``TypeError`` or ``ValueError`` that names the argument, never a clamp.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..host_reads import read, reads_values
from ..positions import check_padding_mask, check_segment_ids

__all__ = ["check_input_ids", "check_mask", "check_masks"]

#: the check of each mask argument, by its name
_MASK_CHECKS: dict[str, Callable[[torch.Tensor, str], torch.Tensor]] = {
    "attention_mask": check_padding_mask,
    "segment_ids": check_segment_ids,
}


def check_input_ids(
    input_ids: torch.Tensor, vocab_size: int, device: torch.device | None = None
) -> torch.Tensor:
    """``input_ids`` as int64, or a TypeError/ValueError naming it.

    Args:
        input_ids: token ids in ``[0, vocab_size)``, any integer dtype.
        vocab_size: the number of token ids.
        device: the model's device, where input_ids must be (None: any).

    Shapes:
        input_ids: ``[batch, seq]`` with ``seq >= 1``, returned as it is.
    """
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(
            f"input_ids must be [batch, seq] with seq >= 1, got shape {tuple(input_ids.shape)}"
        )
    if device is not None and input_ids.device != device:
        raise ValueError(
            f"input_ids is on {input_ids.device} but the model is on {device}: move input_ids there"
        )
    input_ids = input_ids.long()  # uint16/32 have no min() on the CPU
    if reads_values(input_ids):  # one pass; one host read (or one of the forward's)
        # [2] int64: the least and the largest; one or two ids (decoding) are read as they
        # are, as many values without the two kernels that find them
        small = input_ids.numel() <= 2
        bounds = input_ids.view(-1) if small else torch.stack(torch.aminmax(input_ids))
        # read as float64, which orders every int64 as it is (the conversion rounds
        # monotonically and keeps every id below 2**53): one cast, not the two exact halves
        read(bounds.double(), partial(_check_ids, vocab_size, bounds))
    return input_ids


def _check_ids(vocab_size: int, bounds: torch.Tensor, values: list[float]) -> None:
    low, high = min(values), max(values)
    if low < 0 or high >= vocab_size:
        bad = int(low if low < 0 else high)
        if abs(bad) >= 2**53:  # rounded: the exact id, read on the way to the error
            exact = bounds.tolist()
            bad = min(exact) if low < 0 else max(exact)
        raise ValueError(f"input_ids must be in [0, vocab_size={vocab_size}), got {bad}")


def check_mask(
    name: str, value: torch.Tensor, batch: int, length: int, device: torch.device | None = None
) -> torch.Tensor:
    """The mask argument ``name`` (``attention_mask`` or ``segment_ids``) checked, and
    checked to cover the cached tokens and the new ones, on ``device`` (that of
    ``input_ids``; None: any).

    Shapes:
        value: ``[batch, length]`` (``length`` = past + seq), returned as it is.
    """
    value = _MASK_CHECKS[name](value, name)
    if tuple(value.shape) != (batch, length):
        raise ValueError(
            f"{name} must be [batch, past + seq] = [{batch}, {length}] (the cached "
            f"tokens and the new ones), got {tuple(value.shape)}"
        )
    if device is not None and value.device != device:
        raise ValueError(
            f"{name} is on {value.device} but input_ids is on {device}: move {name} there"
        )
    return value


def check_masks(
    attention_mask: torch.Tensor | None,
    segment_ids: torch.Tensor | None,
    batch: int,
    length: int,
    device: torch.device | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None] | None:
    """``(key_padding_mask, segment_ids)``, each checked by :func:`check_mask` (None where
    not given), or None when neither is given."""
    if attention_mask is None and segment_ids is None:
        return None
    mask = (
        None
        if attention_mask is None
        else check_mask("attention_mask", attention_mask, batch, length, device)
    )
    ids = (
        None
        if segment_ids is None
        else check_mask("segment_ids", segment_ids, batch, length, device)
    )
    return mask, ids
