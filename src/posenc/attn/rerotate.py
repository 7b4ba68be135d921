"""Re-rotating a KV cache in place (:meth:`posenc.KVCache.rerotate`): the keys every layer
holds, turned from one RoPE's rotation at their positions to another's (or the same one's)
at shifted positions, by :func:`~posenc.functional.rope_rerotate.rerotate_keys`. Rotations
compose, so this equals recomputing the keys from the raw ones, up to the keys' rounding:
llama.cpp and ONNX Runtime GenAI shift caches so (StreamingLLM, Xiao et al. 2023,
arXiv:2309.17453), where transformers drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch

from ..config import MAX_POSITION, check_int
from ..functional.rope_rerotate import rerotate_keys
from ..host_reads import read_now, reads_values
from ..rotary import RoPE, XPos
from .cache_checks import check_delta, check_layers

if TYPE_CHECKING:
    from .cache import KVCache

__all__ = ["check_moved", "rerotate_cache"]


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


def check_moved(cache: KVCache, delta: int | torch.Tensor) -> None:
    """Raise unless ``delta`` (as :func:`~posenc.attn.cache_checks.check_delta` returns
    it) and the cached positions it moves stay within ``[0, MAX_POSITION]`` (``|delta|``
    too): a value check, read now (before the cache changes) where values are read."""
    positions, held = cache.held_positions()  # [batch, slots], [slots] or None
    shift = torch.as_tensor(delta, device=positions.device).view(-1)
    if not reads_values(positions, shift):
        return
    moved = positions + shift.view(-1, 1)
    if held is not None:
        moved = torch.where(held, moved, torch.zeros_like(moved))  # 0 is in range
    values = torch.stack(torch.aminmax(shift))
    if moved.numel():
        values = torch.cat((values, torch.stack(torch.aminmax(moved))))
    read_now(values, partial(_check_range, delta))


def _check_range(delta: int | torch.Tensor, values: list[int]) -> None:
    shown = delta if isinstance(delta, int) else "a tensor"
    if max(-values[0], values[1]) > MAX_POSITION:
        raise ValueError(f"delta must lie within ±{MAX_POSITION} (2**53), got {shown}")
    if len(values) > 2 and values[2] < 0:
        raise ValueError(
            f"delta={shown} moves a cached position to {values[2]}: positions must stay >= 0"
        )
    if len(values) > 2 and values[3] > MAX_POSITION:
        raise ValueError(
            f"delta={shown} moves a cached position to {values[3]}, past {MAX_POSITION} (2**53)"
        )


def rerotate_cache(
    cache: KVCache,
    rope: RoPE,
    delta: int | torch.Tensor,
    to: RoPE | None,
    layers: Sequence[int] | None,
    seq_len: int | None,
    new_seq_len: int | None,
) -> None:
    """See :meth:`~posenc.KVCache.rerotate`. Every argument is checked before the cache
    changes: a refused call leaves it as it was."""
    old, new = _check(rope, rope if to is None else to, cache)
    chosen = check_layers(layers, len(cache.keys))
    for name, length in (("seq_len", seq_len), ("new_seq_len", new_seq_len)):
        if length is not None:
            check_int(name, length)
    delta = check_delta(delta, cache.positions.shape[0], cache.positions.device)
    check_moved(cache, delta)
    device = cache.positions.device
    before = (old.inv_freq(seq_len, device), old.attention_factor(seq_len))
    after = (new.inv_freq(new_seq_len, device), new.attention_factor(new_seq_len))
    for layer in chosen:
        keys, positions = cache.stored_keys(layer)
        if keys.shape[2]:
            c = old.config
            keys.copy_(rerotate_keys(keys, positions, before, after, delta, c.layout, c.rotary_at))
    cache._shift_checked(delta)
