"""What a :class:`~posenc.models.TransformerLM`'s KV cache holds per layer: the one record
:meth:`~posenc.models.TransformerLM.new_cache` builds a cache from and the forward checks a
given cache against (shapes only: no value is read, no host sync)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..attn import KVCache, StaticKVCache
from ..attn.masks import AttnPattern
from ..config import check_bool

__all__ = ["CacheLayout"]


@dataclass(frozen=True)
class CacheLayout:
    """The sizes of a model's cached keys and values.

    Attributes:
        kv_heads, head_dim: of every layer's keys and values.
        key_dims: per layer, the width of its keys as cached (PoPE's are ``2 · head_dim``).
        keep: per layer, how many past keys it needs (a window's ``W - 1``; None: all).
        dtype, device: of the model's weights.
        clock_heads: per layer, the heads of its forget clock (FoX), or None for none.
    """

    kv_heads: int
    head_dim: int
    key_dims: tuple[int, ...]
    keep: tuple[int | None, ...]
    dtype: torch.dtype
    device: torch.device
    clock_heads: tuple[int | None, ...] = ()

    @classmethod
    def build(
        cls,
        kv_heads: int,
        head_dim: int,
        widths: Sequence[int],
        patterns: Sequence[AttnPattern],
        causal: bool,
        weight: torch.Tensor,
        *,
        clock_heads: Sequence[int | None] = (),
    ) -> CacheLayout:
        """The layout of a model with layers whose keys are ``widths[layer]`` heads wide
        (PoPE's 2) and whose attention has ``patterns[layer]``: a causal local layer needs
        its last ``W - 1`` keys (window ``W``) or ``C - 1`` (chunk ``C``), the others all of
        them; in the dtype and on the device of ``weight``; ``clock_heads``: the heads of
        each layer's forget clock (FoX), None for none."""
        keep = tuple(
            (p.window or p.chunk or 1) - 1 if causal and p.local else None for p in patterns
        )
        key_dims = tuple(head_dim * w for w in widths)
        return cls(
            kv_heads, head_dim, key_dims, keep, weight.dtype, weight.device, tuple(clock_heads)
        )

    def new(self, batch: int, max_seq_len: int, *, rolling: bool, static: bool = False) -> KVCache:
        """An empty cache of this layout (rolling: the local layers keep only ``keep``;
        static: a :class:`~posenc.attn.StaticKVCache`, whose rolling layers keep rings and
        whose forget clocks are made now, so that all its tensors exist from the start:
        :class:`~posenc.models.DecodeStep`)."""
        check_bool("rolling", rolling)
        check_bool("static", static)
        cache = (StaticKVCache if static else KVCache)(
            len(self.key_dims),
            batch,
            self.kv_heads,
            self.head_dim,
            max_seq_len,
            device=self.device,
            dtype=self.dtype,
            keep=list(self.keep) if rolling else None,
            key_dims=list(self.key_dims),
        )
        if static:
            self.add_clocks(cache)
        return cache

    def add_clocks(self, cache: KVCache) -> None:
        """Make the forget clocks of ``cache``'s FoX layers now (where not made yet)."""
        for layer, heads in enumerate(self.clock_heads):
            if heads is not None:
                cache.add_clock(layer, heads)

    def check(self, cache: Any) -> KVCache:
        """``cache``, checked to be a :class:`KVCache` of this layout (rolling or not), or a
        ``TypeError``/``ValueError`` naming what differs."""
        if not isinstance(cache, KVCache):
            raise TypeError(
                f"cache must be a KVCache from model.new_cache(batch, max_seq_len), got "
                f"{type(cache).__name__}"
            )
        cache.check_fits(
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            key_dims=self.key_dims,
            keep=self.keep,
            dtype=self.dtype,
            device=self.device,
        )
        return cache
