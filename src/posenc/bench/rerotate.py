"""Case 8: shifting a KV cache's RoPE keys to new positions, re-rotated in place against
recomputed.

For every cache length ``L``, one row of a single layer's ``L`` cached keys moved by one
position (a StreamingLLM-style shift, Xiao et al. 2023, arXiv:2309.17453):

- ``recompute`` (the floor): the keys computed again from the cached tokens' hidden
  states, ``x · W_k`` rotated at the new positions, written into the cache (what a cache
  that keeps no raw keys must do);
- ``rerotate``: :meth:`posenc.KVCache.rerotate` turning the cached keys in place by the
  difference of the angles (one rotation, no projection).

Both give the same keys (checked once per row, ``max_abs_diff``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..attn import KVCache
from ..rotary import RoPE
from .timing import interleaved, row

__all__ = ["FLOOR", "impls", "run"]

FLOOR = "recompute"


def impls(
    L: int, dim: int = 512, kv_heads: int = 8, head_dim: int = 64
) -> tuple[dict[str, Callable[[], Any]], float]:
    """The two calls of one row and the largest difference between their keys."""
    rope = RoPE(head_dim=head_dim)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, L, dim, generator=gen)  # the cached tokens' hidden states
    w_k = torch.randn(dim, kv_heads * head_dim, generator=gen) / dim**0.5
    positions = torch.arange(L)

    def keys_at(offset: int) -> torch.Tensor:
        k = (x @ w_k).view(1, L, kv_heads, head_dim).transpose(1, 2)
        return rope.rotate(k, rope.rotation(positions + offset), key=True)

    cache = KVCache(1, 1, kv_heads, head_dim, L)
    cache.update_positions(positions[None])
    cache.update(0, keys_at(0), torch.zeros(1, kv_heads, L, head_dim))
    cache.advance(L)
    shifted = [0]

    def recompute() -> None:
        with torch.no_grad():
            shifted[0] += 1
            cache.keys[0].copy_(keys_at(shifted[0]))

    def rerotate() -> None:
        with torch.no_grad():
            cache.rerotate(rope, delta=1)

    expected = keys_at(1)
    probe = KVCache(1, 1, kv_heads, head_dim, L)
    probe.update_positions(positions[None])
    probe.update(0, keys_at(0), torch.zeros(1, kv_heads, L, head_dim))
    probe.advance(L)
    probe.rerotate(rope, delta=1)
    diff = (probe.keys[0] - expected).abs().max().item()
    return {FLOOR: recompute, "rerotate": rerotate}, diff


def run(
    lengths: Sequence[int],
    dim: int = 512,
    kv_heads: int = 8,
    head_dim: int = 64,
    repeat: int = 15,
    warmup: int = 3,
) -> list[dict[str, Any]]:
    """One record per length; each has ``max_abs_diff`` between the two ways' keys."""
    records = []
    for L in lengths:
        calls, diff = impls(L, dim, kv_heads, head_dim)
        config = {"L": L, "dim": dim, "kv_heads": kv_heads, "head_dim": head_dim}
        record = row(config, interleaved(calls, repeat=repeat, warmup=warmup), FLOOR)
        record["max_abs_diff"] = diff
        records.append(record)
    return records
