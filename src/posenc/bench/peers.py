"""Adapters for the peers posenc is measured against, each used only when importable.

Each adapter builds, from the case's configuration, a callable doing the same work as
posenc's implementation, with the peer's own public functions. A peer that is not
installed, or cannot do the case (a layout it does not have), is recorded with the reason
and skipped: a peer never stops the suite (:func:`resolve`).

RoPE adapters return ``rotate(q, k) -> (q', k')`` for ``[batch, heads, seq, head_dim]``
inputs, with their tables (cos/sin or angles) computed once when built, as posenc's are
(a model computes them once per forward and shares them across layers).
Bias adapters return ``attend(q, k, v) -> out``: the peer's bias, materialised for the
causal ``[heads, L, L]`` scores each call, handed to SDPA.
The host-time case (:mod:`~posenc.bench.host`) builds whole calls: transformers' rotation
with its tables computed in the call (:func:`transformers_rotary_call`), and a Hugging Face
``LlamaForCausalLM`` of a given size (:func:`hf_llama`).

Peers: transformers (Llama's ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``, BLOOM's
``build_alibi_tensor``, T5's ``T5Attention.compute_bias``), x-transformers (its
``RotaryEmbedding`` + ``apply_rotary_pos_emb``, ``AlibiPositionalBias``,
``RelativePositionBias``), rotary-embedding-torch (``rotate_queries_or_keys``) and
torchtune (``RotaryPositionalEmbeddings``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "BIAS_PEERS",
    "ROPE_PEERS",
    "Unsupported",
    "hf_llama",
    "resolve",
    "transformers_rotary_call",
    "versions",
]

#: the distribution behind each peer name
DISTRIBUTIONS = {
    "transformers": "transformers",
    "x-transformers": "x-transformers",
    "rotary-embedding-torch": "rotary-embedding-torch",
    "torchtune": "torchtune",
}


class Unsupported(Exception):
    """The peer is installed but cannot do this case (the message says why)."""


def versions() -> dict[str, str]:
    """Each peer's installed version, or ``"not installed"``."""
    out = {}
    for name, dist in DISTRIBUTIONS.items():
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def resolve(
    adapters: Mapping[str, Callable[..., Callable[..., Any]]],
    trial: Callable[[Callable[..., Any]], Any],
    **config: Any,
) -> tuple[dict[str, Callable[..., Any]], dict[str, str]]:
    """Build every adapter for ``config`` and try each once with ``trial(fn)``.

    Returns ``(usable, skipped)``: name -> callable, and name -> ``"not installed: ..."``,
    ``"unsupported: ..."`` or ``"failed: ..."`` for the others.

    >>> def missing(**config):
    ...     import no_such_module_here
    >>> usable, skipped = resolve({"ghost": missing}, trial=lambda fn: fn())
    >>> usable, skipped
    ({}, {'ghost': "not installed: No module named 'no_such_module_here'"})
    """
    usable: dict[str, Callable[..., Any]] = {}
    skipped: dict[str, str] = {}
    for name, adapter in adapters.items():
        try:
            fn = adapter(**config)
            trial(fn)
        except ImportError as e:
            skipped[name] = f"not installed: {e}"
        except Unsupported as e:
            skipped[name] = f"unsupported: {e}"
        except Exception as e:  # a peer's failure is recorded, never raised
            skipped[name] = f"failed: {type(e).__name__}: {e}"[:200]
        else:
            usable[name] = fn
    return usable, skipped


# RoPE: rotate(q, k) for q, k [batch, heads, seq, head_dim]


def _only(layout: str, wanted: str, peer: str) -> None:
    if layout != wanted:
        raise Unsupported(f"{peer} rotates the {wanted} layout only")


def transformers_rope(seq: int, head_dim: int, layout: str, dtype: torch.dtype, **_: Any):
    """Llama's rotary module (a tiny LlamaConfig) for cos/sin, ``apply_rotary_pos_emb``."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    _only(layout, "half", "transformers")
    config = LlamaConfig(
        hidden_size=head_dim, num_attention_heads=1, max_position_embeddings=max(seq, 2)
    )
    probe = torch.empty(0, dtype=dtype)
    cos, sin = LlamaRotaryEmbedding(config)(probe, torch.arange(seq)[None])

    def rotate(q, k):
        return apply_rotary_pos_emb(q, k, cos, sin)

    return rotate


def x_transformers_rope(seq: int, head_dim: int, layout: str, **_: Any):
    """x-transformers' ``RotaryEmbedding`` (angles) and ``apply_rotary_pos_emb``."""
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    _only(layout, "interleaved", "x-transformers")
    freqs, _scale = RotaryEmbedding(head_dim).forward_from_seq_len(seq)

    def rotate(q, k):
        return apply_rotary_pos_emb(q, freqs), apply_rotary_pos_emb(k, freqs)

    return rotate


def rotary_embedding_torch_rope(head_dim: int, layout: str, **_: Any):
    """rotary-embedding-torch's ``RotaryEmbedding.rotate_queries_or_keys`` (its own
    frequency cache; cos/sin are taken in each call, as the library does)."""
    from rotary_embedding_torch import RotaryEmbedding

    _only(layout, "interleaved", "rotary-embedding-torch")
    rope = RotaryEmbedding(dim=head_dim)

    def rotate(q, k):
        return rope.rotate_queries_or_keys(q), rope.rotate_queries_or_keys(k)

    return rotate


def torchtune_rope(seq: int, head_dim: int, layout: str, **_: Any):
    """torchtune's ``RotaryPositionalEmbeddings`` (cached tables); it takes
    ``[batch, seq, heads, head_dim]``, so q and k are passed as transposed views."""
    from torchtune.modules import RotaryPositionalEmbeddings

    _only(layout, "interleaved", "torchtune")
    rope = RotaryPositionalEmbeddings(dim=head_dim, max_seq_len=max(seq, 2))

    def rotate(q, k):
        return (
            rope(q.transpose(1, 2)).transpose(1, 2),
            rope(k.transpose(1, 2)).transpose(1, 2),
        )

    return rotate


ROPE_PEERS: dict[str, Callable[..., Callable[..., Any]]] = {
    "transformers": transformers_rope,
    "x-transformers": x_transformers_rope,
    "rotary-embedding-torch": rotary_embedding_torch_rope,
    "torchtune": torchtune_rope,
}


# Bias attention: attend(q, k, v), causal, the peer's bias materialised for SDPA


def _causal_sdpa(q, k, v, bias: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """SDPA with ``bias`` ``[..., L, L]`` plus the causal mask, added after q·k is scaled
    by ``scale`` (default ``1/sqrt(head_dim)``)."""
    L = q.shape[-2]
    mask = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)
    bias = bias.to(q.dtype).masked_fill(mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


def bloom_alibi(encoding: str, heads: int, **_: Any):
    """BLOOM's ``build_alibi_tensor``: slope·key position (softmax ignores the per-query
    shift), ``[heads, 1, L]`` broadcast over the queries."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    if encoding != "alibi":
        raise Unsupported("BLOOM's bias is ALiBi")

    def attend(q, k, v):
        L = k.shape[-2]
        alibi = build_alibi_tensor(torch.ones(1, L), heads, torch.float32)
        return _causal_sdpa(q, k, v, alibi.view(1, heads, 1, L))

    return attend


def t5_bias(encoding: str, heads: int, **_: Any):
    """T5's relative bias: ``T5Attention.compute_bias`` of a tiny decoder T5Config
    (32 causal buckets, max distance 128); T5 does not scale q·k."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    if encoding != "t5":
        raise Unsupported("this peer's bias is T5's")
    config = T5Config(d_model=64, d_kv=64, num_heads=heads, is_decoder=True)
    module = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)

    def attend(q, k, v):
        L = k.shape[-2]
        bias = module.compute_bias(L, L)
        return _causal_sdpa(q, k, v, bias, scale=1.0)

    return attend


def x_transformers_bias(encoding: str, heads: int, **_: Any):
    """x-transformers' ``AlibiPositionalBias`` (it caches the ``[heads, L, L]`` bias) or
    ``RelativePositionBias`` (T5's buckets, causal)."""
    from x_transformers.x_transformers import AlibiPositionalBias, RelativePositionBias

    if encoding == "alibi":
        module: torch.nn.Module = AlibiPositionalBias(heads=heads)
    elif encoding == "t5":
        module = RelativePositionBias(scale=1.0, causal=True, heads=heads)
    else:
        raise Unsupported("x-transformers has ALiBi and T5's bias")

    def attend(q, k, v):
        L = k.shape[-2]
        return _causal_sdpa(q, k, v, module(L, L)[None])

    return attend


BIAS_PEERS: dict[str, Callable[..., Callable[..., Any]]] = {
    "transformers (BLOOM)": bloom_alibi,
    "transformers (T5)": t5_bias,
    "x-transformers": x_transformers_bias,
}


# Host time per call: the whole call, as a user of the peer makes it


def transformers_rotary_call(seq: int, head_dim: int, **_: Any):
    """``rotate(q, k)`` as a Llama layer does it: ``LlamaRotaryEmbedding`` (a tiny
    LlamaConfig) computes cos/sin in the call, ``apply_rotary_pos_emb`` rotates q and k; the
    position ids are made once, as the model makes them once per forward."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(
        hidden_size=head_dim, num_attention_heads=1, max_position_embeddings=max(seq, 2)
    )
    rotary = LlamaRotaryEmbedding(config)
    position_ids = torch.arange(seq)[None]

    def rotate(q, k):
        cos, sin = rotary(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    return rotate


def hf_llama(vocab_size: int, dim: int, n_layers: int, n_heads: int, mlp_ratio: int, **_: Any):
    """``(model, new_cache, cache_kwarg)``: a randomly initialised ``LlamaForCausalLM`` in eval
    mode with the widths of a :class:`~posenc.models.TransformerLM` (hidden ``dim``, MLP
    ``mlp_ratio * dim``, untied head, no GQA; SDPA attention), a maker of empty
    ``DynamicCache`` objects, and the name its forward takes a cache by (``cache`` in recent
    releases, ``past_key_values`` before)."""
    import inspect

    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=dim,
        intermediate_size=mlp_ratio * dim,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    params = inspect.signature(model.forward).parameters
    kwarg = "cache" if "cache" in params else "past_key_values"
    return model, lambda: DynamicCache(config=config), kwarg
