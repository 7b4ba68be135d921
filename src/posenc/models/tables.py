"""The tables an encoding computes once per forward of :class:`~posenc.models.TransformerLM`
and shares with every layer.

A rotary encoding's rotation is computed in the model itself; a bias encoding's table is
decided here: :func:`shared_bias` materialises ``encoding.bias`` once per forward where
that pays, training on the CPU, so the layers neither recompute it (FIRE's MLP, T5's
buckets) nor keep copies of it, and one backward through the one table reaches the
encoding's parameters (autograd sums the gradients of every layer into it).
"""

from __future__ import annotations

from typing import cast

import torch

from ..attn.bias_blocks import shift_table
from ..base import BiasEncoding, Encoding
from ..positions import arange

__all__ = ["shared_bias"]


def shared_bias(
    encoding: Encoding,
    attn_positions: tuple[torch.Tensor, torch.Tensor] | None,
    seq: int,
    causal: bool,
    training: bool,
    device: torch.device,
) -> torch.Tensor | None:
    """The bias table every layer's attention takes (``bias=`` of
    :func:`posenc.attention`), or None where the layers are better off without one.

    It is computed when it pays: a bias encoding whose bias depends on the positions only
    (not ``needs_q``, not adding to the values), a forward that trains (``training``) on
    the CPU without a KV cache, and a bias the fused linear-bias path would not run per
    score instead (``linear_slopes`` is None, or under ``torch.compile``, where that path
    is off). Elsewhere (inference, flex attention on other devices, decoding) attention
    computes what it needs itself.

    Args:
        encoding: the model's encoding.
        attn_positions: ``(q_positions, k_positions)`` the layers pass to attention, or
            None for its default, the token index ``arange(seq)``.
        seq: the number of tokens of this forward (no cache).
        causal: whether the model is causal (the fused path's slopes depend on it).
        training: whether this forward needs gradients.
        device: the model's device.

    Returns:
        ``[heads, seq, seq]`` (``[batch, heads, seq, seq]`` for ``[batch, seq]`` positions)
        or None.

    Example:
        >>> import posenc
        >>> t5 = posenc.create("t5", n_heads=4)
        >>> shared_bias(t5, None, 6, True, True, torch.device("cpu")).shape
        torch.Size([4, 6, 6])
        >>> shared_bias(t5, None, 6, True, False, torch.device("cpu")) is None
        True
    """
    if encoding.kind != "bias" or not training or device.type != "cpu":
        return None
    bias = cast(BiasEncoding, encoding)
    if bias.needs_q or bias.adds_to_values:
        return None
    if bias.linear_slopes(causal) is not None and not torch.compiler.is_compiling():
        return None
    if attn_positions is None:
        if bias.shift_invariant:  # from its 2·seq - 1 distances
            return shift_table(bias, seq, device)
        q_positions = k_positions = arange(seq, device=device)
    else:
        q_positions, k_positions = attn_positions
    return bias.bias(q_positions, k_positions)
