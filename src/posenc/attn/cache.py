"""A preallocated key/value cache for incremental decoding, one for every layer of a model.

Rotary encodings rotate keys before they are cached, so cached keys keep the rotation of
their own position; the cache also keeps each token's position, for bias encodings and the
causal mask of the next steps.
"""

from __future__ import annotations

import torch

__all__ = ["KVCache"]


class KVCache:
    """Keys, values and positions of every layer, preallocated for incremental decoding.

    Each forward step writes its new keys at ``length`` in every layer (:meth:`update`),
    then advances ``length`` once (:meth:`advance`). Rotary encodings rotate keys before
    they are cached, so cached keys keep the rotation of their own position.

    Shapes:
        keys, values: ``[n_layers, batch, kv_heads, max_seq_len, head_dim]``;
        positions: ``[batch, max_seq_len]``.
    """

    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        max_seq_len: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (n_layers, batch, kv_heads, max_seq_len, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.positions = torch.zeros(batch, max_seq_len, device=device, dtype=torch.long)
        self.max_seq_len = max_seq_len
        self.length = 0
        #: set once explicit positions were cached: attention then needs them all
        self.explicit_positions = False

    def check_batch(self, batch: int) -> None:
        """Raise unless this cache holds ``batch`` sequences."""
        if self.keys.shape[1] != batch:
            raise ValueError(
                f"cache holds {self.keys.shape[1]} sequences but input_ids has {batch}: "
                "make one with model.new_cache(batch, max_seq_len)"
            )

    def _end(self, n: int) -> int:
        end = self.length + n
        if end > self.max_seq_len:
            raise ValueError(
                f"KV cache holds max_seq_len={self.max_seq_len} positions; "
                f"{self.length} are used and {n} more do not fit"
            )
        return end

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``[batch, kv_heads, n, head_dim]`` after the cached ones and return
        all keys and values so far, ``[batch, kv_heads, length + n, head_dim]``."""
        end = self._end(k.shape[2])
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def update_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Store the new tokens' positions (``[n]`` or ``[batch, n]``, integers) and return
        all positions so far, ``[batch, length + n]``."""
        if positions.is_floating_point():
            raise TypeError(f"KVCache stores integer positions, got {positions.dtype}")
        end = self._end(positions.shape[-1])
        self.positions[:, self.length : end] = positions
        return self.positions[:, :end]

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as filled, once every layer has been updated."""
        self.length = self._end(n)
