"""Re-rotating a KV cache in place (:meth:`posenc.KVCache.rerotate`): the keys every layer
holds, turned from one RoPE's rotation at their positions to another's (or the same one's)
at shifted positions, by :func:`~posenc.functional.rope_rerotate.rerotate_keys`. Rotations
compose, so this equals recomputing the keys from the raw ones, up to the keys' rounding:
llama.cpp and ONNX Runtime GenAI shift caches so (StreamingLLM, Xiao et al. 2023,
arXiv:2309.17453), where transformers drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from ..config import MAX_INT, check_int
from ..functional.rope_rerotate import rerotate_keys
from ..rotary import RoPE, XPos

if TYPE_CHECKING:
    from .cache import KVCache

__all__ = ["rerotate_cache"]


def _check(rope: object, to: object, cache: KVCache) -> tuple[RoPE, RoPE]:
    for name, enc in (("rope", rope), ("to", to)):
        if not isinstance(enc, RoPE) or isinstance(enc, XPos):
            raise TypeError(
                f"{name} must be a RoPE encoding (rope, p_rope, mrope's text positions; not "
                f"xpos, whose keys also scale), got {type(enc).__name__}"
            )
    old, new = rope, to
    assert isinstance(old, RoPE) and isinstance(new, RoPE)
    for enc in (old, new):
        if enc.merges_attention:  # dca: its keys are cached unrotated
            raise TypeError(
                f"{enc.info.name!r} caches its keys unrotated (attention turns them): shift "
                "its positions instead of re-rotating the keys"
            )
    shape = ("layout", "rotary_dim", "rotary_at")
    mine, theirs = ([getattr(e.config, k) for k in shape] for e in (old, new))
    if mine != theirs:
        raise ValueError(
            f"rope and to must share their layout, rotary_dim and rotary_at, got {mine} and "
            f"{theirs}"
        )
    width = cache.keys[0].shape[-1]
    if old.head_dim != width:
        raise ValueError(f"rope has head_dim={old.head_dim} but the cache's keys are {width} wide")
    return old, new


def rerotate_cache(
    cache: KVCache,
    rope: RoPE,
    delta: int | torch.Tensor,
    to: RoPE | None,
    layers: Sequence[int] | None,
    seq_len: int | None,
    new_seq_len: int | None,
) -> None:
    """See :meth:`~posenc.KVCache.rerotate`."""
    old, new = _check(rope, rope if to is None else to, cache)
    n_layers = len(cache.keys)
    chosen = range(n_layers) if layers is None else list(layers)
    for layer in chosen:
        check_int("layers[i]", layer, minimum=0, maximum=n_layers - 1)
    batch = cache.positions.shape[0]
    if isinstance(delta, torch.Tensor):
        if delta.is_floating_point() or delta.shape not in ((), (batch,)):
            raise ValueError(f"delta must be an int or [batch={batch}] integers, got {delta!r}")
        delta = delta.to(cache.positions.device).view(-1, 1)
    else:
        check_int("delta", delta, minimum=-MAX_INT)
    device = cache.positions.device
    before = (old.inv_freq(seq_len, device), old.attention_factor(seq_len))
    after = (new.inv_freq(new_seq_len, device), new.attention_factor(new_seq_len))
    for layer in chosen:
        keys, positions = cache.stored_keys(layer)
        if keys.shape[2]:
            c = old.config
            keys.copy_(rerotate_keys(keys, positions, before, after, delta, c.layout, c.rotary_at))
    cache.shift_positions(delta)
