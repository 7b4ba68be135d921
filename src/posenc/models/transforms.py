"""A :class:`~posenc.models.TransformerLM` layer's transforms of an encoding that reads the
layer's input into its scores (:class:`~posenc.base.InputTransforms`: PaTH, Yang et al.
2025, arXiv:2505.16381): computed from the layer's input, cached beside their keys, and
handed to attention with the keys in the order of the sequence, the new tokens last.

Attention accumulates the transforms of the tokens between a key and its query in the
order of the keys, the queries the last of them (:mod:`posenc.attn.runners.path`). A
:class:`~posenc.attn.KVCache` returns its keys so. A :class:`~posenc.attn.StaticKVCache`
returns every slot, the empty ones after the new tokens, and a ring layer's slots rotated
(token ``t`` in slot ``t % n``): :func:`in_sequence_order` gathers them into the order of
the sequence (the empty slots, zeros, hidden and with no transform, first), with the
context's key positions and masks, by index tensors built from ``cache.filled``: no host
read, shapes fixed from one step to the next.
"""

from __future__ import annotations

from typing import cast

import torch

from ..attn import AttentionContext, KVCache, Masks, StaticKVCache
from ..attn.checks import zero_nonfinite
from ..base import BiasEncoding, InputTransforms
from ..positions import AttnPositions

__all__ = ["in_sequence_order", "layer_transforms"]


def layer_transforms(
    encoding: InputTransforms,
    x: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: KVCache | None,
    layer: int,
    context: AttentionContext,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionContext]:
    """The keys, values and transforms (``encoding.transforms(x)`` in the keys' dtype,
    with or without a cache, non-finite ones zeroed as the keys are) of the tokens this
    layer's queries see, and the context they go with: with a cache, each key is cached
    with its transform beside it (the cache's keys are ``2 · head_dim`` wide: the
    encoding's ``width_factor``), and both come back for the cached tokens and the new
    ones, in the order of the sequence.

    Shapes:
        x ``[batch, seq, dim]``, k, v ``[batch, kv_heads, seq, head_dim]`` -> k, v and the
        transforms ``[batch, kv_heads, keys, head_dim]`` (``keys``: ``seq``, or what the
        cache returns).
    """
    a = zero_nonfinite(encoding.transforms(x)).to(k.dtype)  # [b, kv_h, s, hd]
    if a.shape[1] != k.shape[1]:
        name = cast(BiasEncoding, encoding).info.name
        raise ValueError(
            f"the encoding {name!r} has a transform for {a.shape[1]} key heads but the layer "
            f"has n_kv_heads={k.shape[1]}: create it with kv_heads={k.shape[1]}"
        )
    if cache is None:
        return k, v, a, context
    both, v = cache.update(layer, torch.cat((k, a), dim=-1), v)
    k, a = both.chunk(2, dim=-1)
    if isinstance(cache, StaticKVCache):
        order = static_order(cache, layer, k.shape[2], x.shape[1])
        k, v, a = (t.index_select(2, order) for t in (k, v, a))
        context = in_sequence_order(context, order)
    return k, v, a, context


def static_order(cache: StaticKVCache, layer: int, keys: int, new: int) -> torch.Tensor:
    """The slots of a :class:`~posenc.attn.StaticKVCache` layer's ``keys`` in the order of
    the sequence, ``new`` tokens last: a layer of every slot rotated so that its empty
    slots (after the new tokens) come first; a ring of ``n`` (its slots before the new
    tokens) rotated so that its oldest token comes first. From ``cache.filled``, the
    tokens held before this step.

    Shapes:
        -> ``[keys]`` int64, a permutation.
    """
    slots = torch.arange(keys, device=cache.filled.device)
    ring = cache.keep[layer]
    if ring is None:  # slot filled + new is the first empty one
        return (slots + cache.filled + new) % keys
    held = slots[:ring]  # the ring as it was, token t in slot t % ring
    return torch.cat(((held + cache.filled) % ring, slots[ring:]))


def in_sequence_order(context: AttentionContext, order: torch.Tensor) -> AttentionContext:
    """``context`` with its keys taken in ``order``: their positions, padding, documents
    and given mask gathered (the queries' are as they were), positions explicit.

    Shapes:
        order ``[k_len]`` int64, a permutation of the keys.
    """
    p = context.positions
    positions = AttnPositions(p.q, p.k.index_select(-1, order), explicit=True)
    masks = context.masks
    if masks is not None:
        kpm, segments, given = masks.key_padding_mask, masks.k_segments, masks.attn_mask
        masks = Masks(
            None if kpm is None else kpm.index_select(-1, order),
            masks.q_segments,
            None if segments is None else segments.index_select(-1, order),
            None if given is None else given.index_select(-1, order),
        )
    return AttentionContext(positions, masks)
