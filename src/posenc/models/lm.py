"""A small pre-norm decoder-only language model that takes any positional encoding.

The encoding is routed by its kind: ``additive`` is added to the token embeddings once,
``rotary`` rotates queries and keys in every layer, ``bias`` is handed to
:func:`posenc.attention`, ``none`` does nothing. One encoding instance serves every layer
(as T5 shares its relative bias). It is the model every experiment in posenc uses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..attn import KVCache
from ..attn.bias_plan import AttnShape
from ..base import Encoding, RotaryEncoding
from ..builder import build
from ..config import check_int
from .blocks import Block
from .generation import generate
from .inputs import check_input_ids
from .shared import forward_inputs, shared_bias

__all__ = ["TransformerLM"]


class TransformerLM(nn.Module):
    """A pre-norm decoder (or, with ``causal=False``, encoder) language model.

    Args:
        vocab_size: number of token ids.
        dim: model width.
        n_layers: number of blocks.
        n_heads: query heads; ``dim`` must be divisible by it.
        encoding: a registered name, a dict ``{"name": ..., **config}`` or an
            :class:`~posenc.base.Encoding`; its size key (``dim``, ``head_dim`` or
            ``n_heads``) is filled in from the model.
        n_kv_heads: key/value heads for grouped-query attention (default ``n_heads``).
        mlp_ratio: hidden width of the MLP as a multiple of ``dim``.
        causal: a causal decoder (True) or a bidirectional encoder (False).

    Token embeddings are scaled by ``sqrt(dim)`` (Vaswani et al. 2017) and tied to the output
    head.

    Shapes:
        input_ids: ``[batch, seq]`` -> logits ``[batch, seq, vocab_size]``.

    Example:
        >>> model = TransformerLM(vocab_size=256, dim=64, n_layers=2, n_heads=4,
        ...                       encoding="sinusoidal")
        >>> model(torch.randint(0, 256, (2, 10))).shape
        torch.Size([2, 10, 256])
    """

    encoding: Encoding
    embed: nn.Embedding
    blocks: nn.ModuleList
    norm: nn.RMSNorm

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        n_layers: int,
        n_heads: int,
        encoding: str | Mapping[str, Any] | Encoding,
        n_kv_heads: int | None = None,
        mlp_ratio: int = 4,
        causal: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("dim", dim),
            ("n_layers", n_layers),
            ("n_heads", n_heads),
            ("mlp_ratio", mlp_ratio),
        ):
            check_int(name, value)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_int("n_kv_heads", n_kv_heads)
        if dim % n_heads:
            raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        self.vocab_size, self.dim, self.n_layers = vocab_size, dim, n_layers
        self.n_heads, self.n_kv_heads, self.causal = n_heads, n_kv_heads, causal
        self.head_dim = dim // n_heads
        self.encoding = build(encoding, dim=dim, head_dim=self.head_dim, n_heads=n_heads)
        if self.encoding.position_axes != 1:
            raise ValueError(
                f"encoding {self.encoding.info.name!r} takes image-grid positions "
                f"([seq, {self.encoding.position_axes}]); TransformerLM is a model of token "
                "sequences: use a 1-D encoding (posenc.available() lists them)"
            )
        self.embed = nn.Embedding(vocab_size, dim)
        self.blocks = nn.ModuleList(
            Block(dim, n_heads, n_kv_heads, mlp_ratio) for _ in range(n_layers)
        )
        self.norm = nn.RMSNorm(dim)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Unit-variance token embeddings after scaling; GPT-2 style projections, with the
        residual outputs scaled down by ``sqrt(2 * n_layers)``."""
        nn.init.normal_(self.embed.weight, std=self.dim**-0.5)
        for block in cast(Iterable[Block], self.blocks):
            reads, writes = block.projections()
            for linear in reads:
                nn.init.normal_(linear.weight, std=0.02)
            for linear in writes:
                nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * self.n_layers))

    def new_cache(self, batch: int, max_seq_len: int) -> KVCache:
        """An empty :class:`KVCache` for ``batch`` sequences of up to ``max_seq_len`` tokens."""
        p = self.embed.weight
        return KVCache(
            self.n_layers,
            batch,
            self.n_kv_heads,
            self.head_dim,
            max_seq_len,
            device=p.device,
            dtype=p.dtype,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits for every token.

        Args:
            input_ids: ``[batch, seq]`` token ids in ``[0, vocab_size)``, any integer dtype.
            positions: ``[seq]`` or ``[batch, seq]``; default ``arange(seq)`` after the
                tokens already in ``cache``, or, with ``attention_mask`` or ``segment_ids``,
                positions that count real tokens and restart in every document
                (:func:`~posenc.positions.from_padding`,
                :func:`~posenc.positions.from_segments`). An encoding may take its own
                shape: M-RoPE's ``[3, batch, seq]`` ids (:func:`posenc.positions.multimodal`)
                rotate q and k, and the causal mask follows the token order.
            cache: a :class:`KVCache` from :meth:`new_cache`; the new tokens' keys and values
                are appended to it (decoding).
            attention_mask: ``[batch, past + seq]``, 1 (or True) for real tokens and 0 for
                padding, over the cached tokens and the new ones (Hugging Face's
                convention); pads are hidden from every query.
            segment_ids: ``[batch, past + seq]`` integer ids of packed documents, over the
                cached tokens and the new ones: a token sees only its own document.

        Returns:
            ``[batch, seq, vocab_size]``. Logits of pad tokens are not meaningful.
        """
        input_ids = check_input_ids(input_ids, self.vocab_size)
        b, s = input_ids.shape
        inputs = forward_inputs(
            self.encoding, input_ids, positions, cache, attention_mask, segment_ids
        )
        x = self.embed(input_ids) * math.sqrt(self.dim)
        rotation = None
        if self.encoding.kind == "additive":
            x = self.encoding(x, inputs.positions)
        elif self.encoding.kind == "rotary":  # computed once, shared by every layer
            length = None if inputs.explicit else inputs.context.positions.k_len
            rotation = cast(RotaryEncoding, self.encoding).rotation(inputs.positions, length)
        trains = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        k_len = inputs.context.positions.k_len
        shape = AttnShape(b, self.n_heads, self.n_kv_heads, s, k_len, self.head_dim)
        table = shared_bias(
            self.encoding,
            inputs.context,
            shape,
            causal=self.causal,
            training=trains,
            cached=cache is not None,
        )
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                encoding=self.encoding,
                rotation=rotation,
                context=inputs.context,
                causal=self.causal,
                cache=cache,
                layer=i,
                bias=table,
            )
        if cache is not None:
            cache.advance(s)
        return F.linear(self.norm(x), self.embed.weight)  # tied head

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Continue ``input_ids`` by ``max_new_tokens`` tokens: :func:`generate
        <posenc.models.generation.generate>` with this model, where every argument is
        described (greedy at ``temperature=0``, KV-cached with ``use_cache``).

        Shapes:
            input_ids: ``[batch, seq]`` -> ``[batch, seq + max_new_tokens]``.
        """
        return generate(
            self,
            input_ids,
            max_new_tokens,
            temperature,
            top_k,
            use_cache,
            generator,
            attention_mask=attention_mask,
            positions=positions,
        )
