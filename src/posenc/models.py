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
from .build import build
from .config import check_int
from .positions import (
    arange,
    check_padding_mask,
    check_segment_ids,
    from_padding,
    from_segments,
)

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
        key_padding_mask: torch.Tensor | None = None,
        segment_ids: tuple[torch.Tensor, torch.Tensor] | None = None,
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
            q, k = encoding.rotate(q, rotation), encoding.rotate(k, rotation, key=True)
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
            key_padding_mask=key_padding_mask,
            segment_ids=segment_ids,
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
        input_ids = self._check_input_ids(input_ids)
        b, s = input_ids.shape
        offset = 0 if cache is None else cache.length
        if cache is not None:
            cache.check_batch(b)
        masks = self._masks(attention_mask, segment_ids, b, offset + s)
        if positions is None and masks is not None:
            # each document, each unpadded prompt, gets the positions it has alone
            mask, ids = masks
            full = from_padding(mask) if ids is None else from_segments(ids, mask)
            positions = full[:, offset:]
        explicit = positions is not None
        order = None  # the positions' token order, for the causal mask and the cache
        if explicit:
            positions = self.encoding.check_positions(positions, seq_len=s, batch=b)
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
        key_padding_mask = segments = None
        if masks is not None:
            key_padding_mask, ids = masks
            segments = None if ids is None else (ids[:, offset:], ids)  # (queries, keys)

        x = self.embed(input_ids) * math.sqrt(self.dim)
        rotation = None
        if self.encoding.kind == "additive":
            x = self.encoding(x, positions)
        elif self.encoding.kind == "rotary":  # computed once, shared by every layer
            rotation = self.encoding.rotation(positions, None if explicit else offset + s)
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                self.encoding,
                rotation,
                attn_positions,
                self.causal,
                cache,
                i,
                key_padding_mask,
                segments,
            )
        if cache is not None:
            cache.advance(s)
        return F.linear(self.norm(x), self.embed.weight)  # tied head

    def _check_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids`` as int64 ``[batch, seq]``, or a TypeError/ValueError naming it."""
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
        if (
            input_ids.is_floating_point()
            or input_ids.is_complex()
            or input_ids.dtype == (torch.bool)
        ):
            raise TypeError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(
                f"input_ids must be [batch, seq] with seq >= 1, got shape {tuple(input_ids.shape)}"
            )
        input_ids = input_ids.long()  # uint16/32 have no min() on the CPU
        readable = not torch.compiler.is_compiling() and input_ids.device.type != "meta"
        if readable and input_ids.numel():
            low, high = input_ids.min().item(), input_ids.max().item()
            if low < 0 or high >= self.vocab_size:
                bad = low if low < 0 else high
                raise ValueError(
                    f"input_ids must be in [0, vocab_size={self.vocab_size}), got {bad}"
                )
        return input_ids

    @staticmethod
    def _masks(
        attention_mask: torch.Tensor | None,
        segment_ids: torch.Tensor | None,
        batch: int,
        length: int,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None] | None:
        """``(key_padding_mask, segment_ids)`` checked against ``[batch, past + seq]``, or
        None when neither is given."""
        if attention_mask is None and segment_ids is None:
            return None
        checked = []
        for name, value, check in (
            ("attention_mask", attention_mask, check_padding_mask),
            ("segment_ids", segment_ids, check_segment_ids),
        ):
            if value is not None:
                value = check(value, name)
                if tuple(value.shape) != (batch, length):
                    raise ValueError(
                        f"{name} must be [batch, past + seq] = [{batch}, {length}] (the cached "
                        f"tokens and the new ones), got {tuple(value.shape)}"
                    )
            checked.append(value)
        return checked[0], checked[1]

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
        """Continue ``input_ids`` by ``max_new_tokens`` tokens.

        ``temperature=0`` is greedy decoding. With ``use_cache`` each step runs only the new
        token against cached keys and values, and gives the same tokens as recomputing the
        whole sequence (``use_cache=False``), except for RoPE scalings whose frequencies
        follow the current length (``dynamic``, ``longrope``) past their original length:
        cached keys keep the frequencies they were rotated with, as in transformers.

        Args:
            attention_mask: ``[batch, seq]``, 0 for the pads of a (left-)padded batch of
                prompts: each prompt then generates what it generates alone.
            positions: the prompt's positions (``[seq]``, ``[batch, seq]``, or M-RoPE's
                ``[3, batch, seq]`` from :func:`posenc.positions.multimodal`); each new
                token takes the next one after the largest (for M-RoPE on every axis, as
                text). Default: ``arange``, or counted over real tokens with
                ``attention_mask``.

        Shapes:
            input_ids: ``[batch, seq]`` -> ``[batch, seq + max_new_tokens]``.
        """
        if not self.causal:
            raise ValueError("generate() needs a causal model (causal=True)")
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        check_temperature(temperature)
        input_ids = self._check_input_ids(input_ids)
        b, s = input_ids.shape
        mask = None if attention_mask is None else self._masks(attention_mask, None, b, s)[0]
        if positions is None and mask is not None:
            positions = from_padding(mask)
        if positions is not None:
            positions = self.encoding.check_positions(positions, seq_len=s, batch=b)
        cache = self.new_cache(b, s + max_new_tokens) if use_cache else None
        tokens, step_ids, step_positions = input_ids, input_ids, positions
        for _ in range(max_new_tokens):
            if use_cache:
                logits = self(step_ids, step_positions, cache, attention_mask=mask)
            else:
                logits = self(tokens, positions, attention_mask=mask)
            next_token = sample(logits[:, -1], temperature, top_k, generator)  # [b, 1]
            tokens = torch.cat((tokens, next_token), dim=1)
            step_ids = next_token
            if mask is not None:
                mask = torch.cat((mask, mask.new_ones(b, 1)), dim=1)
            if positions is not None:
                step_positions = next_positions(positions)
                positions = torch.cat((positions, step_positions), dim=-1)
        return tokens


def next_positions(positions: torch.Tensor) -> torch.Tensor:
    """The position of the token after ``positions``: one past the largest, per sequence.

    M-RoPE's ``[3, batch, seq]`` ids continue as text (the same id on every axis) after
    the largest id of any axis, as Qwen2-VL's decoding does.

    Shapes:
        ``[seq]`` -> ``[1]``; ``[batch, seq]`` -> ``[batch, 1]``;
        ``[3, batch, seq]`` -> ``[3, batch, 1]``.
    """
    if positions.dim() == 3:  # M-RoPE: the largest id over the axes
        return (positions.amax(dim=(0, 2)) + 1).view(1, -1, 1).expand(positions.shape[0], -1, 1)
    return positions.amax(dim=-1, keepdim=True) + 1


def check_temperature(temperature: float) -> None:
    """Raise unless ``temperature`` is a finite number >= 0."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")


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
    check_temperature(temperature)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        check_int("top_k", top_k)
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
