"""How :class:`~posenc.models.TransformerLM` starts: the standard deviations of its weights.

Every linear is drawn from a normal of standard deviation ``fan_in ** -0.5``, so a
unit-variance input gives unit-variance outputs (PyTorch's default scale; OLMo's "mitchell"
init), and the linears that write back to the residual stream are divided further by
``sqrt(2 * n_layers)`` (Radford et al. 2019, GPT-2). GPT-2's fixed 0.02 is a width-768
value: at the arena's widths (32-128) it is a quarter to a sixth of this, and the model then
neither learns in-context retrieval in its budget nor reaches the same perplexity
(docs/arena.md, "The model", has the ablation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from .blocks import Block

__all__ = ["init_weights", "residual_std"]


def residual_std(fan_in: int, n_layers: int) -> float:
    """The standard deviation of a linear that writes to the residual stream:
    ``fan_in ** -0.5 / sqrt(2 * n_layers)``."""
    return fan_in**-0.5 / math.sqrt(2 * n_layers)


@torch.no_grad()
def init_weights(
    embed: nn.Embedding, blocks: Iterable[Block], head: nn.Linear | None, n_layers: int
) -> None:
    """Initialise a model in place: token embeddings of standard deviation ``dim ** -0.5``
    (unit variance once scaled by ``sqrt(dim)``), each block's linears as the module says,
    sink logits at zero, and an untied ``head`` at ``dim ** -0.5`` (first logits of unit
    variance)."""
    dim = embed.embedding_dim
    nn.init.normal_(embed.weight, std=dim**-0.5)
    for block in blocks:
        reads, writes = block.projections()
        for linear in reads:
            nn.init.normal_(linear.weight, std=linear.in_features**-0.5)
        for linear in writes:
            nn.init.normal_(linear.weight, std=residual_std(linear.in_features, n_layers))
        if block.attn.sinks is not None:
            block.attn.sinks.zero_()
    if head is not None:
        nn.init.normal_(head.weight, std=dim**-0.5)
