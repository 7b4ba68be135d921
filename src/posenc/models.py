"""A small pre-norm decoder-only language model that takes any positional encoding.

The encoding is routed by its kind: ``additive`` is added to the token embeddings once,
``rotary`` rotates queries and keys in every layer, ``bias`` is handed to
:func:`posenc.attention`, ``none`` does nothing. One encoding instance serves every layer
(as T5 shares its relative bias). It is the model every experiment in posenc uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache, attention
from .base import Encoding
from .config import check_int
from .positions import arange
from .registry import resolve

__all__ = ["TransformerLM"]


class SelfAttention(nn.Module):
    """Multi-head self-attention with grouped-query heads.

    Shapes:
        x: ``[batch, seq, dim]`` -> ``[batch, seq, dim]``.
    """

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=False)
        self.out = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        encoding: Encoding,
        rotation: tuple[torch.Tensor, ...] | None,
        attn_positions: tuple[torch.Tensor, torch.Tensor] | None,
        causal: bool,
        cache: KVCache | None,
        layer: int,
    ) -> torch.Tensor:
        b, s, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv(x).split(
            [self.n_heads * hd, self.n_kv_heads * hd, self.n_kv_heads * hd], dim=-1
        )
        q = q.view(b, s, self.n_heads, hd).transpose(1, 2)  # [b, h, s, hd]
        k = k.view(b, s, self.n_kv_heads, hd).transpose(1, 2)  # [b, kv_h, s, hd]
        v = v.view(b, s, self.n_kv_heads, hd).transpose(1, 2)  # [b, kv_h, s, hd]
        if rotation is not None:  # rotate before caching: cached keys keep their angle
            q, k = encoding.apply(q, rotation), encoding.apply(k, rotation, key=True)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        q_pos, k_pos = attn_positions if attn_positions is not None else (None, None)
        out = attention(
            q,
            k,
            v,
            encoding=encoding if encoding.kind == "bias" else None,
            q_positions=q_pos,
            k_positions=k_pos,
            causal=causal,
        )
        return self.out(out.transpose(1, 2).reshape(b, s, self.n_heads * hd))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(dim)
        self.attn = SelfAttention(dim, n_heads, n_kv_heads)
        self.mlp_norm = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim, bias=False),
            nn.GELU(),
            nn.Linear(mlp_ratio * dim, dim, bias=False),
        )

    def forward(self, x: torch.Tensor, *args: Any) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), *args)
        return x + self.mlp(self.mlp_norm(x))


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
        self.encoding = resolve(encoding, dim=dim, head_dim=self.head_dim, n_heads=n_heads)
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
        for block in self.blocks:
            for linear in (block.attn.qkv, block.mlp[0]):
                nn.init.normal_(linear.weight, std=0.02)
            for linear in (block.attn.out, block.mlp[2]):
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
    ) -> torch.Tensor:
        """Logits for every token.

        Args:
            input_ids: ``[batch, seq]`` token ids.
            positions: ``[seq]`` or ``[batch, seq]``; default ``arange(seq)`` after the
                tokens already in ``cache``. An encoding may take its own shape: M-RoPE's
                ``[3, batch, seq]`` ids (:func:`posenc.positions.multimodal`) rotate q and k,
                and the causal mask follows the token order.
            cache: a :class:`KVCache` from :meth:`new_cache`; the new tokens' keys and values
                are appended to it (decoding).

        Returns:
            ``[batch, seq, vocab_size]``.
        """
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(
                f"input_ids must be an integer [batch, seq] tensor, got {input_ids.dtype} "
                f"of shape {tuple(input_ids.shape)}"
            )
        b, s = input_ids.shape
        offset = 0 if cache is None else cache.length
        explicit = positions is not None
        order = None  # the positions' token order, for the causal mask and the cache
        if explicit:
            self.encoding.check_positions(positions, seq_len=s, batch=b)
            rotary = self.encoding.kind == "rotary"
            order = self.encoding.causal_positions(positions) if rotary else positions
        elif cache is not None and cache.explicit_positions:
            raise ValueError(
                "the cache holds explicit positions: pass positions for the new tokens too"
            )
        # Positions without an order of their own (M-RoPE's [3, batch, seq]) rotate q and k
        # only; the mask then follows the token index, as with default positions.
        explicit_order = order is not None
        if order is None:
            order = arange(s, device=input_ids.device, offset=offset)
        if positions is None:
            positions = order
        # Attention builds its own (faster) causal mask from the default positions; explicit
        # positions are passed on, with those of the cached keys.
        attn_positions = None
        if cache is not None:
            k_positions = cache.update_positions(order)
            if explicit_order or cache.explicit_positions:
                cache.explicit_positions = True
                q_pos = order if order.dim() == 2 else order.expand(b, s)
                attn_positions = (q_pos, k_positions)
        elif explicit_order:
            attn_positions = (order, order)

        x = self.embed(input_ids) * math.sqrt(self.dim)
        rotation = None
        if self.encoding.kind == "additive":
            x = self.encoding(x, positions)
        elif self.encoding.kind == "rotary":  # computed once, shared by every layer
            rotation = self.encoding.rotation(positions, None if explicit else offset + s)
        for i, block in enumerate(self.blocks):
            x = block(x, self.encoding, rotation, attn_positions, self.causal, cache, i)
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
    ) -> torch.Tensor:
        """Continue ``input_ids`` by ``max_new_tokens`` tokens.

        ``temperature=0`` is greedy decoding. With ``use_cache`` each step runs only the new
        token against cached keys and values, and gives the same tokens as recomputing the
        whole sequence (``use_cache=False``), except for RoPE scalings whose frequencies
        follow the current length (``dynamic``, ``longrope``) past their original length:
        cached keys keep the frequencies they were rotated with, as in transformers.

        Shapes:
            input_ids: ``[batch, seq]`` -> ``[batch, seq + max_new_tokens]``.
        """
        if not self.causal:
            raise ValueError("generate() needs a causal model (causal=True)")
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        tokens = input_ids
        cache = self.new_cache(input_ids.shape[0], input_ids.shape[1] + max_new_tokens)
        step_input = input_ids
        for _ in range(max_new_tokens):
            logits = self(step_input, cache=cache) if use_cache else self(tokens)
            next_token = sample(logits[:, -1], temperature, top_k, generator)  # [b, 1]
            tokens = torch.cat((tokens, next_token), dim=1)
            step_input = next_token
        return tokens


def sample(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of ``logits`` ``[batch, vocab]``: greedy at ``temperature=0``,
    else from the softmax at that temperature, optionally restricted to the ``top_k`` best.

    Shapes:
        logits: ``[batch, vocab]`` -> ``[batch, 1]``.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        check_int("top_k", top_k)
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
