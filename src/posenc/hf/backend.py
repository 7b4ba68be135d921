"""posenc as a transformers attention backend: ``attn_implementation="posenc"``.

transformers looks an attention function up by the name in ``config._attn_implementation``
(its ``AttentionInterface``: ``sdpa``, ``eager``, ``flex_attention``, ...) and builds the
masks for it by the same name (its ``AttentionMaskInterface``). :func:`register` adds
:func:`~posenc.hf.backend.posenc_attention` under ``"posenc"`` with transformers' own SDPA
mask maker, so every model transformers runs keeps its masks exactly as transformers
decides them (causal order,
padding, sliding windows, chunks, packed sequences, a family's bidirectional overlays), and
the scores run through :func:`posenc.attention`: its planner, its runners and its rule for
non-finite values and rows that see no key (zeros, never NaN). A layer that carries a posenc
bias encoding (:data:`ENCODING`, set by :func:`posenc.hf.apply`) adds it to the scores.

Nothing here imports transformers until :func:`register` runs.

Shapes (transformers' attention functions):
    query ``[batch, heads, q_len, head_dim]``, key and value ``[batch, kv_heads, k_len,
    head_dim]``, the mask ``[batch | 1, 1, q_len, k_len]`` bool or None -> ``([batch, q_len,
    heads, head_dim], None)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..attn import attention
from ..attn.masks import AttentionContext

__all__ = ["ENCODING", "NAME", "posenc_attention", "register"]

#: the name transformers knows the backend by (``attn_implementation=NAME``)
NAME = "posenc"
#: the attribute of an attention module that holds its posenc bias encoding, if any
ENCODING = "posenc_encoding"


def register() -> str:
    """Register :func:`~posenc.hf.backend.posenc_attention` with transformers under
    :data:`NAME` (and transformers' SDPA mask maker for it) and return the name; registering
    again is a no-op.

    Example:
        >>> name = register()  # doctest: +SKIP
        >>> model = AutoModelForCausalLM.from_pretrained(  # doctest: +SKIP
        ...     path, attn_implementation=name
        ... )
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, posenc_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def posenc_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """A transformers attention function (the signature of its ``sdpa_attention_forward``)
    that runs :func:`posenc.attention`.

    Args:
        module: the model's attention layer: its ``is_causal`` (default True) and its
            posenc bias encoding (attribute :data:`ENCODING`) are read.
        query, key, value: the layer's heads; key and value may have fewer heads (GQA).
        attention_mask: transformers' boolean mask (True = may attend) or None (nothing
            masked but the causal order).
        dropout: must be 0: posenc's attention has no dropout.
        scaling: the score scale, default ``1/sqrt(head_dim)``.
        is_causal: overrides ``module.is_causal``.
        kwargs: ``softcap`` (Gemma 2's logit soft cap) and ``s_aux`` (gpt-oss's sinks) are
            read; ``sliding_window`` is already in the mask; the others are not used.

    Returns:
        ``(output [batch, q_len, heads, head_dim], None)``: no attention weights.
    """
    if dropout:
        raise ValueError(
            f"attn_implementation={NAME!r} has no attention dropout, got dropout={dropout}: "
            "set the config's attention_dropout to 0, or call model.eval()"
        )
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    q_len, k_len = query.shape[2], key.shape[2]
    context = None
    if attention_mask is not None:
        if attention_mask.dtype != torch.bool:
            raise TypeError(
                f"attn_implementation={NAME!r} takes transformers' boolean masks (register() "
                f"makes them), got a {attention_mask.dtype} attention_mask"
            )
        context = AttentionContext.build(
            q_len, k_len, query.shape[0], query.device, attn_mask=attention_mask
        )
    elif causal and 1 < q_len < k_len:
        # transformers leaves the mask out here only for the prefill of an empty static
        # cache, whose later keys are empty slots: SDPA's causal mask (top-left) sees the
        # first q_len keys, the prompt
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    out = attention(
        query,
        key,
        value,
        getattr(module, ENCODING, None),
        causal=causal,
        scale=scaling,
        context=context,
        softcap=kwargs.get("softcap"),
        sinks=kwargs.get("s_aux"),
    )
    return out.transpose(1, 2).contiguous(), None
