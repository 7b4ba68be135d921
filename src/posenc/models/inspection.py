"""What each attention layer of a :class:`~posenc.models.TransformerLM` computed: its
attention probabilities, read out by a reference path.

:func:`posenc.attention` never returns the probabilities (the fused kernels never build
them). :func:`attention_maps` runs the model once with a forward pre-hook on every
:class:`~posenc.models.SelfAttention` that records the layer's input, then recomputes
``softmax(q kᵀ / sqrt(head_dim) + bias)`` from it in float32 as the layer does: the same
projections and rotation (the layer's own :meth:`~posenc.models.SelfAttention.project`),
its query temperature, the bias encoding's :meth:`~posenc.base.BiasEncoding.bias`, its
softcap, the mask of the forward's :class:`~posenc.attn.AttentionContext` with the layer's
window or chunk, its sink logits, grouped-query heads (Vaswani et al. 2017; Ainslie et al.
2023, arXiv:2305.13245). The model itself is untouched: the hooks are removed afterwards.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ..attn import AttentionContext
from ..attn.runners.math import probabilities
from ..base import BiasEncoding, Encoding, InputBias, InputTransforms, ScoreBias
from .blocks import Block, SelfAttention
from .lm import TransformerLM

__all__ = ["attention_maps", "layer_probabilities"]


def attention_maps(
    model: TransformerLM, input_ids: torch.Tensor, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """The attention probabilities of every layer and head of ``model`` on ``input_ids``.

    Args:
        model: the model (its mode and weights are left as they are).
        input_ids: ``[batch, seq]`` token ids in ``[0, vocab_size)``.
        positions: as :meth:`TransformerLM.forward` (default ``arange(seq)``).

    Returns:
        ``[n_layers, batch, n_heads, seq, seq]`` float32 on the model's device: entry
        ``[l, b, h, i, j]`` is how much query ``i`` attends to key ``j`` in head ``h`` of
        layer ``l``. Each row sums to 1, except in layers with sinks (gpt-oss), where the
        sink takes the rest of the row's mass (it has no value, so no column); masked keys
        (future ones in a causal model, those outside a layer's window or chunk) get 0.

    Raises:
        TypeError: when ``model`` is not a :class:`TransformerLM`.
        ValueError: for bad ``input_ids`` or ``positions`` (from the model's own checks).

    Example:
        >>> model = TransformerLM(vocab_size=256, dim=32, n_layers=2, n_heads=4,
        ...                       encoding="rope")
        >>> maps = attention_maps(model, torch.randint(0, 256, (1, 5)))
        >>> maps.shape
        torch.Size([2, 1, 4, 5, 5])
        >>> bool(torch.allclose(maps.sum(-1), torch.ones(2, 1, 4, 5)))
        True
        >>> float(maps[0, 0, 0, 0, 1])  # the first token sees no later one
        0.0
    """
    if not isinstance(model, TransformerLM):
        raise TypeError(f"model must be a posenc.models.TransformerLM, got {type(model).__name__}")
    maps: list[torch.Tensor] = []

    def record(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if kwargs["cache"] is not None:  # never: attention_maps passes none
            raise ValueError("attention_maps reads attention without a KV cache")
        (x,) = args
        layer = cast(SelfAttention, module)
        maps.append(
            layer_probabilities(
                layer,
                x,
                kwargs["encoding"],
                kwargs["rotation"],
                kwargs["context"],
                kwargs["causal"],
            )
        )

    layers = [cast(Block, block).attn for block in model.blocks]
    handles = [attn.register_forward_pre_hook(record, with_kwargs=True) for attn in layers]
    try:
        with torch.no_grad():
            model(input_ids, positions)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(maps)


def layer_probabilities(
    attn: SelfAttention,
    x: torch.Tensor,
    encoding: Encoding,
    rotation: tuple[torch.Tensor, ...] | None,
    context: AttentionContext,
    causal: bool,
) -> torch.Tensor:
    """The attention probabilities of one :class:`SelfAttention` on its input ``x``.

    Args:
        attn: the layer.
        x, encoding, rotation, context, causal: what the layer was called with (see
            :meth:`SelfAttention.forward`), without a cache.

    Returns:
        ``[batch, n_heads, seq, seq]`` float32: ``softmax(cap(q kᵀ · scale +
        bias))`` over the keys a query may see and the layer's sink, if it has one (whose
        column is left out: rows sum to less than 1); 0 elsewhere, and a query that sees
        no key gets zeros.
    """
    hd, heads, kv_heads = attn.head_dim, attn.n_heads, attn.n_kv_heads
    q, k, _ = attn.project(x, encoding, rotation)  # as the layer: [b, h | kv_h, s, hd]
    q = attn.temper(q, context)
    k = k.repeat_interleave(heads // kv_heads, dim=1)  # grouped-query: [b, h, s, hd]
    scale = hd**-0.5 if attn.scale is None else attn.scale
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale  # [b, h, s, s]
    if encoding.kind == "bias":
        p = context.positions
        enc = cast(BiasEncoding, encoding)
        given = {"x": x} if isinstance(enc, InputBias) else {"q": q, "scale": scale}  # FoX
        if isinstance(enc, ScoreBias):  # CoPE counts with q and k
            given["k"] = k
        if isinstance(enc, InputTransforms):  # PaTH: q, the layer's keys and its input
            given = {"q": q, "k": k[:, :: heads // kv_heads], "x": x, "scale": scale}
        bias = enc.bias(p.q, p.k, **given)
        scores = scores + bias.float()  # [(b,) h, s, s] broadcasts
    allowed = context.allowed(causal, attn.pattern)
    mask, dead = (None, None) if allowed is None else allowed
    probs = probabilities(scores, allowed=mask, softcap=attn.softcap, sinks=attn.sinks)
    return probs if dead is None else probs.masked_fill(dead, 0.0)  # no key seen: zeros
