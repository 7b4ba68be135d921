"""Case 6: one decode step of sliding-window attention with a rolling KV cache, against
the full cache.

For every encoding (``alibi``, ``rope`` by default) and every cache length ``L``, one row
of a single layer's decode step (one token's q, k, v, rotated first for a rotary encoding;
its positions and keys written into a :class:`~posenc.attn.cache.KVCache`; then
:func:`posenc.attention` over what the cache returns):

- ``full cache``: a cache that keeps every key, full causal attention (the floor);
- ``window W, full cache``: the same cache, attention with ``window=W``: the mask hides
  the old keys, the cache still holds them;
- ``rolling cache W``: a cache that keeps only the last ``W - 1`` keys
  (``KVCache(keep=[W - 1])``, Mistral's rolling buffer), attention with ``window=W``
  over those and the new one.

Each cache is preallocated for ``L`` tokens and filled with ``L - warmup - repeat`` of
them, so every timed step sees about ``L`` keys and the full cache ends full. Besides the
time, each result has ``kv_bytes`` (and ``kv_mib``, ``x_floor_kv``): the keys and values
its cache holds (:meth:`~posenc.attn.cache.KVCache.memory`), ``(W - 1) / L`` of the full
cache's for the rolling one, whatever ``L``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from ..attn import KVCache, attention
from ..base import BiasEncoding, Encoding, RotaryEncoding
from ..builder import build
from .timing import interleaved, row

__all__ = ["ENCODINGS", "FLOOR", "impls", "run"]

ENCODINGS = ("alibi", "rope")
FLOOR = "full cache"


def _names(window: int) -> tuple[str, str]:
    return f"window {window}, full cache", f"rolling cache {window}"


def _filled(L: int, prefix: int, keep: int | None, shape: tuple[int, int, int]) -> KVCache:
    """A one-layer cache for ``L`` tokens holding ``prefix`` random keys and values at
    positions ``0 .. prefix - 1``; ``keep`` past keys (None: all)."""
    kv_heads, head_dim, _ = shape
    cache = KVCache(1, 1, kv_heads, head_dim, L, keep=[keep])
    gen = torch.Generator().manual_seed(1)
    k, v = torch.randn(2, 1, kv_heads, prefix, head_dim, generator=gen).unbind(0)
    cache.update_positions(torch.arange(prefix)[None])
    cache.update(0, k, v)
    cache.advance(prefix)
    return cache


def _step(cache: KVCache, enc: Encoding, window: int | None, heads: int) -> Callable[[], Any]:
    """A callable decoding one token per call at the cache's next position: rotate (rotary
    encodings), store, attend."""
    kv_heads, head_dim = cache.keys[0].shape[1], cache.keys[0].shape[3]
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, heads, 1, head_dim, generator=gen)
    k, v = torch.randn(2, 1, kv_heads, 1, head_dim, generator=gen).unbind(0)
    rotary = cast(RotaryEncoding, enc) if enc.kind == "rotary" else None
    bias = enc if isinstance(enc, BiasEncoding) else None

    def step() -> torch.Tensor:
        with torch.no_grad():
            p = cache.length
            positions = cache.update_positions(torch.tensor([[p]]))  # [1, p + 1]
            q1, k1 = q, k
            if rotary is not None:
                tables = rotary.rotation(torch.tensor([p]))
                q1, k1 = rotary.rotate(q, tables), rotary.rotate(k, tables, key=True)
            keys, values = cache.update(0, k1, v)  # [1, kv_heads, visible, head_dim]
            out = attention(
                q1,
                keys,
                values,
                bias,
                q_positions=positions[:, -1:],
                k_positions=positions[:, -keys.shape[2] :],
                window=window,
            )
            cache.advance(1)
        return out

    return step


def impls(
    encoding: str,
    L: int,
    window: int = 256,
    heads: int = 8,
    kv_heads: int = 8,
    head_dim: int = 64,
    steps: int = 8,
) -> tuple[dict[str, Callable[[], Any]], dict[str, int]]:
    """The step callables of one row (name -> no-argument call, ``steps`` calls each at
    most) and the KV bytes of each one's cache."""
    if steps >= L or window < 2:
        raise ValueError(f"L must be > steps ({steps}) and window >= 2, got {L} and {window}")
    enc = build(encoding, n_heads=heads, head_dim=head_dim)
    shape = (kv_heads, head_dim, heads)
    prefix = L - steps
    windowed, rolling = _names(window)
    caches = {
        FLOOR: (_filled(L, prefix, None, shape), None),
        windowed: (_filled(L, prefix, None, shape), window),
        rolling: (_filled(L, prefix, window - 1, shape), window),
    }
    calls = {name: _step(cache, enc, w, heads) for name, (cache, w) in caches.items()}
    return calls, {name: sum(cache.memory()) for name, (cache, _) in caches.items()}


def run(
    lengths: Sequence[int],
    encodings: Sequence[str] = ENCODINGS,
    window: int = 256,
    heads: int = 8,
    kv_heads: int = 8,
    head_dim: int = 64,
    repeat: int = 15,
    warmup: int = 3,
) -> list[dict[str, Any]]:
    """One record per (encoding, length); each result has ``kv_bytes``, ``kv_mib`` and
    ``x_floor_kv`` (its cache's keys and values over the full cache's)."""
    records = []
    for encoding in encodings:
        for L in lengths:
            calls, kv = impls(encoding, L, window, heads, kv_heads, head_dim, warmup + repeat)
            config = {
                "encoding": encoding,
                "L": L,
                "window": window,
                "heads": heads,
                "kv_heads": kv_heads,
                "head_dim": head_dim,
            }
            record = row(config, interleaved(calls, repeat=repeat, warmup=warmup), FLOOR)
            for name, result in record["results"].items():
                result["kv_bytes"] = kv[name]
                result["kv_mib"] = kv[name] / 2**20
                result["x_floor_kv"] = kv[name] / kv[FLOOR]
            records.append(record)
    return records
