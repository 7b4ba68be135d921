"""A decode step to export: a :class:`~posenc.models.TransformerLM` and its
:class:`~posenc.attn.StaticKVCache` as one module whose buffers are the cache's tensors.

``torch.export`` traces a module's buffers as state and keeps their in-place writes
(``index_copy_`` of the new keys, the count advanced) as buffer mutations of the program;
a tensor reached through another object would be traced as a constant instead. So the
step holds the cache's keys, values, positions, clocks and count as buffers and hands
them to the cache for each call.
"""

from __future__ import annotations

import torch
from torch import nn

from ..attn import StaticKVCache

__all__ = ["DecodeStep"]


class DecodeStep(nn.Module):
    """``model(ids, positions, cache=cache)`` as a module that owns ``cache``'s tensors.

    Args:
        model: a :class:`~posenc.models.TransformerLM` (any module with its call).
        cache: its static cache (``model.new_cache(batch, max_seq_len, static=True)``),
            after the prompt when the step to export is the one-token step (the prompt and
            the step are two graphs).

    Shapes:
        ids: ``[batch, seq]`` -> logits ``[batch, seq, vocab_size]``.

    Example:
        >>> import torch
        >>> from posenc.models import TransformerLM
        >>> model = TransformerLM(16, 8, n_layers=1, n_heads=2, encoding="rope").eval()
        >>> cache = model.new_cache(1, 8, static=True)
        >>> _ = model(torch.zeros(1, 3, dtype=torch.long), cache=cache)  # the prompt
        >>> step = DecodeStep(model, cache)
        >>> program = torch.export.export(step, (torch.zeros(1, 1, dtype=torch.long),))
        >>> run = program.module()
        >>> for _ in range(2):
        ...     logits = run(torch.zeros(1, 1, dtype=torch.long))
        >>> int(run.filled)  # the program's own cache: 3 + 2 tokens
        5
    """

    positions: torch.Tensor
    filled: torch.Tensor

    def __init__(self, model: nn.Module, cache: StaticKVCache) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be an nn.Module (a TransformerLM), got {type(model).__name__}"
            )
        if not isinstance(cache, StaticKVCache):
            raise TypeError(
                "cache must be a StaticKVCache (model.new_cache(batch, max_seq_len, "
                f"static=True)), got {type(cache).__name__}"
            )
        layout = getattr(model, "cache_layout", None)
        if callable(layout):  # a TransformerLM: the cache must fit it, its clocks exist now
            layout().check(cache)
            layout().add_clocks(cache)
        self.model, self.cache = model, cache
        # the cache's tensors become this module's state, which a moved copy or an exported
        # program advances without the cache: its count is in `filled` alone from now on
        cache.host_filled = None
        self.layers = len(cache.keys)
        for i in range(self.layers):
            self.register_buffer(f"keys_{i}", cache.keys[i])
            self.register_buffer(f"values_{i}", cache.values[i])
        for i in cache.clocks:  # FoX's forget clocks, and each one's last
            self.register_buffer(f"clocks_{i}", cache.clocks[i])
            self.register_buffer(f"last_clocks_{i}", cache.last_clocks[i])
        self.register_buffer("positions", cache.positions)
        self.register_buffer("filled", cache.filled)
        for n in cache.ring_positions:  # the rings of window and chunk layers
            self.register_buffer(f"ring_positions_{n}", cache.ring_positions[n])
            self.register_buffer(f"ring_real_{n}", cache.ring_real[n])

    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        cache = self.cache
        names = ("keys", "values", "clocks", "last_clocks", "positions", "filled")
        before = {name: getattr(cache, name) for name in (*names, "ring_positions", "ring_real")}
        cache.keys = [getattr(self, f"keys_{i}") for i in range(self.layers)]
        cache.values = [getattr(self, f"values_{i}") for i in range(self.layers)]
        for name in ("clocks", "last_clocks"):
            setattr(cache, name, {i: getattr(self, f"{name}_{i}") for i in before["clocks"]})
        cache.positions, cache.filled = self.positions, self.filled
        for name in ("ring_positions", "ring_real"):
            setattr(cache, name, {n: getattr(self, f"{name}_{n}") for n in before[name]})
        try:
            return self.model(ids, positions, cache)
        finally:  # a trace's tensors never stay in the cache
            for name, value in before.items():
                setattr(cache, name, value)
