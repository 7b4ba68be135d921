"""Flex attention's block masks (:func:`flex_block_mask`): the causal order, a window or a
chunk of the default positions (cached per shape) or of explicit ones, or a call's own
``mask_mod`` (padding and documents); the blocks a window or chunk hides are skipped.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from ..positions import query_offset

if TYPE_CHECKING:
    from .masks import AttnPattern

__all__ = ["flex_block_mask"]


@functools.lru_cache(maxsize=32)
def _default_mask(q_len: int, k_len: int, device: torch.device, causal: bool, pattern: AttnPattern):
    """The block mask of the default positions (queries are the last ``q_len`` keys),
    cached per shape and pattern."""
    from torch.nn.attention.flex_attention import create_block_mask

    offset = query_offset(q_len, k_len)

    def by_index(b, h, q_idx, kv_idx):
        return pattern.visible(q_idx + offset, kv_idx, causal)

    return create_block_mask(by_index, None, None, q_len, k_len, device=device)


def _positions_mask(
    q_positions: torch.Tensor, k_positions: torch.Tensor, causal: bool, pattern: AttnPattern
):
    """The block mask of explicit positions (``[len]`` or ``[batch, len]``)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if q_positions.dim() == 1 and k_positions.dim() == 1:

        def shared(b, h, q_idx, kv_idx):
            return pattern.visible(q_positions[q_idx], k_positions[kv_idx], causal)

        q_len, k_len = len(q_positions), len(k_positions)
        return create_block_mask(shared, None, None, q_len, k_len, device=q_positions.device)

    batch = max(p.shape[0] for p in (q_positions, k_positions) if p.dim() == 2)
    q2, k2 = q_positions.expand(batch, -1), k_positions.expand(batch, -1)  # [b, len]

    def batched(b, h, q_idx, kv_idx):
        return pattern.visible(q2[b, q_idx], k2[b, kv_idx], causal)

    return create_block_mask(batched, batch, None, q2.shape[1], k2.shape[1], device=q2.device)


def flex_block_mask(
    batch: int,
    q_len: int,
    k_len: int,
    device: torch.device,
    q_positions: torch.Tensor | None,
    k_positions: torch.Tensor | None,
    causal: bool,
    mask_mod,
    pattern: AttnPattern,
):
    """The block mask of a flex call: ``mask_mod``'s (padding and documents, the causal
    part and the pattern included), else the causal mask and the pattern (window, chunk)
    of the positions (of the default positions, None: cached per shape), else None
    (nothing masked). Blocks the window or chunk hides are skipped: a sliding window costs
    ``O(L·W)``, not ``O(L²)``. ``pattern``: the window or chunk (``FULL``: none)."""
    if mask_mod is not None:
        from torch.nn.attention.flex_attention import create_block_mask

        return create_block_mask(mask_mod, batch, None, q_len, k_len, device=device)
    if not causal and not pattern.local:
        return None
    if q_positions is None or k_positions is None:  # given together, or neither
        return _default_mask(q_len, k_len, device, causal, pattern)
    return _positions_mask(q_positions, k_positions, causal, pattern)
