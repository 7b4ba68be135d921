"""A small pre-norm decoder-only language model that takes any positional encoding, the
same in every layer or one per layer (a :class:`~posenc.models.plan.LayerPlan`).

An encoding is routed by its kind: ``additive`` is added to the token embeddings once,
``rotary`` rotates queries and keys in its layers, ``bias`` is handed to
:func:`posenc.attention`, ``none`` does nothing. Layers with equal specs share one encoding
instance (as T5 shares its relative bias) and one rotation or bias table per forward. It is
the model every experiment in posenc uses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ..attn import KVCache
from ..attn.checks import check_scale
from ..attn.masks import FULL
from ..attn.planner import AttnShape
from ..base import Encoding, InputBias, ScoreWeights
from ..base.bias import UNCHANGED
from ..config import check_bool, check_int
from ..host_reads import batched, checked, traced
from .blocks import Block, SelfAttention, check_layer_args
from .caching import CacheLayout
from .calls import forward_of, layers_of, norm
from .generation import generate
from .init import init_weights
from .inputs import check_input_ids
from .plan import LayerPlan
from .routing import build_routing, resolve_plan
from .shared import (
    ForwardInputs,
    check_plan_positions,
    forward_inputs,
    layer_contexts,
    layer_tables,
    rotations_of,
)
from .spec import EncodingSpec, LayerSpec

__all__ = ["TransformerLM"]


class TransformerLM(nn.Module):
    """A pre-norm decoder (or, with ``causal=False``, encoder) language model.

    Args:
        vocab_size: number of token ids.
        dim: model width.
        n_layers: number of blocks.
        n_heads: query heads; ``dim`` must be divisible by it.
        encoding: the same encoding in every layer: a registered name, a dict
            ``{"name": ..., **config}`` or an :class:`~posenc.base.Encoding`; its size key
            (``dim``, ``head_dim`` or ``n_heads``) is filled in from the model. Not with
            ``plan``.
        n_kv_heads: key/value heads for grouped-query attention (default ``n_heads``).
        mlp_ratio: hidden width of the MLP as a multiple of ``dim``.
        causal: a causal decoder (True) or a bidirectional encoder (False).
        plan: one :class:`~posenc.models.spec.LayerSpec` per layer, as a
            :class:`~posenc.models.plan.LayerPlan` (``LayerPlan.nope_every(...)``,
            ``LayerPlan.local_global(...)``, ...) or a list: each layer's encoding, window or
            chunk, sinks, softcap and query temperature. Not with ``encoding``.

    Attributes:
        plan: the :class:`~posenc.models.plan.LayerPlan` (``encoding=`` gives
            ``LayerPlan.uniform(n_layers, encoding)``).
        encoding: the model's encoding: with ``encoding=`` (or any plan with one
            encoding) that encoding; in a mixed plan the input's additive encoding if
            there is one, else the first layer's encoding that is not NoPE. Its parameters
            keep the state_dict keys ``encoding.*``.
        extra_encodings: the plan's other encodings (``extra_encodings.<i>.*``; empty
            with one encoding). :attr:`encodings` lists them all;
            :meth:`check_positions` checks positions against every one.
        tie_embeddings: compute the logits with the token embedding matrix instead of a
            head of their own (GPT-2's and Gemma's tie; Llama's default is untied). Off by
            default: with the embeddings at unit scale, a tied head starts out predicting each
            input token again (its logit is ``sqrt(dim)``), and the model then fails to learn
            in-context retrieval at the arena's sizes (docs/arena.md, "The model").
        scale: every layer's score scale (``q · kᵀ`` times it, before a bias), default
            ``head_dim ** -0.5`` (Gemma's: :func:`posenc.hf.score_scale` of its config).

    Token embeddings are scaled by ``sqrt(dim)`` (Vaswani et al. 2017), so they enter the
    residual stream at unit scale, the scale of the sinusoidal and the other additive tables.

    Shapes:
        input_ids: ``[batch, seq]`` -> logits ``[batch, seq, vocab_size]``.

    Example:
        >>> model = TransformerLM(vocab_size=256, dim=64, n_layers=2, n_heads=4,
        ...                       encoding="sinusoidal")
        >>> model(torch.randint(0, 256, (2, 10))).shape
        torch.Size([2, 10, 256])
    """

    encoding: Encoding
    extra_encodings: nn.ModuleList
    embed: nn.Embedding
    blocks: nn.ModuleList
    norm: nn.RMSNorm
    head: nn.Linear | None

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        n_layers: int,
        n_heads: int,
        encoding: EncodingSpec = None,
        n_kv_heads: int | None = None,
        mlp_ratio: int = 4,
        causal: bool = True,
        *,
        plan: LayerPlan | Sequence[LayerSpec] | None = None,
        tie_embeddings: bool = False,
        scale: float | None = None,
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
        check_bool("causal", causal)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_layer_args(dim, n_heads, n_kv_heads, None, None)
        self.vocab_size, self.dim, self.n_layers = vocab_size, dim, n_layers
        self.n_heads, self.n_kv_heads, self.causal = n_heads, n_kv_heads, causal
        self.head_dim = dim // n_heads
        self.plan = resolve_plan(encoding, plan, n_layers)
        routing = build_routing(
            self.plan, dim=dim, head_dim=self.head_dim, n_heads=n_heads, kv_heads=n_kv_heads
        )
        self.encoding, *others = routing.encodings
        self.extra_encodings = nn.ModuleList(others)
        self._layer_encoding, self._input_encoding = routing.layers, routing.input
        self.embed = nn.Embedding(vocab_size, dim)
        self.scale = check_scale(scale, self.head_dim) if scale is not None else None
        self.blocks = nn.ModuleList(
            Block(dim, n_heads, n_kv_heads, mlp_ratio, spec, scale=self.scale) for spec in self.plan
        )
        self.norm = nn.RMSNorm(dim)
        check_bool("tie_embeddings", tie_embeddings)
        self.head = None if tie_embeddings else nn.Linear(dim, vocab_size, bias=False)
        self._layout: CacheLayout | None = None  # cache_layout(), built once per dtype, device
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the weights again (:func:`~posenc.models.init.init_weights`: every linear at
        ``fan_in ** -0.5``, residual writes divided by ``sqrt(2 * n_layers)``, token
        embeddings of unit variance once scaled)."""
        init_weights(self.embed, cast(Iterable[Block], self.blocks), self.head, self.n_layers)

    @property
    def encodings(self) -> tuple[Encoding, ...]:
        """Every distinct encoding of the plan: :attr:`encoding`, then
        :attr:`extra_encodings`."""
        layers = layers_of(self)  # read per forward: no nn.Module.__getattr__
        first, others = layers["encoding"], layers["extra_encodings"]
        return (cast(Encoding, first), *cast(Iterable[Encoding], others))

    def check_positions(
        self, positions: torch.Tensor, *, seq_len: int | None = None, batch: int | None = None
    ) -> torch.Tensor:
        """``positions`` checked against every encoding of the plan (each raises for what it
        cannot take: a learned table's limit, M-RoPE's ids in a layer without M-RoPE),
        returned as the model computes with them (integer dtypes as int64).

        Shapes:
            positions: ``[seq]``, ``[batch, seq]`` (or an encoding's own shape), unchanged.
        """
        return check_plan_positions(self.encodings, positions, seq_len=seq_len, batch=batch)[0]

    def new_cache(
        self, batch: int, max_seq_len: int, *, rolling: bool = True, static: bool = False
    ) -> KVCache:
        """An empty :class:`KVCache` for ``batch`` sequences of up to ``max_seq_len`` tokens.

        With ``rolling`` (and a causal model), a layer with a window of ``W`` keeps only its
        last ``W - 1`` keys and values, a layer with a chunk of ``C`` its last ``C - 1``:
        no later query sees an older one (positions must then grow by one or more per
        token, as they do by default). ``cache.memory()`` gives the bytes per layer.

        With ``static``, a :class:`~posenc.attn.StaticKVCache` instead: the same shapes at
        every step, so that one compiled decode step serves every position (rolling
        layers keep rings of their last keys; ``attention_mask`` then covers all
        ``max_seq_len`` slots)."""
        return self.cache_layout().new(batch, max_seq_len, rolling=rolling, static=static)

    def cache_layout(self) -> CacheLayout:
        """What this model's cache holds per layer (:meth:`new_cache` builds it, the forward
        checks a given cache against it); built once per dtype and device of the weights."""
        weight = self.embed.weight
        layout = self._layout
        if layout is None or layout.dtype != weight.dtype or layout.device != weight.device:
            layout = self._layout = self._build_layout()
        return layout

    def _build_layout(self) -> CacheLayout:
        """:meth:`cache_layout`, built from the plan and the weights."""
        encodings = self.encodings
        layers = [encodings[e] for e in self._layer_encoding]
        widths = [getattr(enc, "width_factor", 1) for enc in layers]
        clocks = [self.n_heads if isinstance(enc, InputBias) else None for enc in layers]
        # a stick-breaking layer (ScoreWeights) keeps every key: its stick breaks in the
        # order the keys are held, which a rolling buffer's wrapped slots would scramble
        patterns = [
            FULL if isinstance(enc, ScoreWeights) else cast(Block, block).attn.pattern
            for enc, block in zip(layers, self.blocks, strict=True)
        ]
        return CacheLayout.build(
            self.n_kv_heads,
            self.head_dim,
            widths,
            patterns,
            self.causal,
            self.embed.weight,
            clock_heads=clocks,
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
                tokens already in ``cache`` (after the last cached position, where the
                cache holds positions given or shifted), or, with ``attention_mask`` or
                ``segment_ids``, positions that count real tokens and restart in every
                document (:func:`~posenc.positions.from_padding`,
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
        encodings = self.encodings
        with traced(batched):  # every value check of the inputs in one host read
            input_ids = check_input_ids(input_ids, self.vocab_size, self.embed.weight.device)
            if cache is not None and not torch.compiler.is_compiling():  # shapes only
                self.cache_layout().check(cache)
            inputs = forward_inputs(
                encodings, input_ids, positions, cache, attention_mask, segment_ids
            )
        # checked above: the layers read no value on the host; no encoding changes during
        # the forward: a bias encoding's state is compared once, not once per layer
        with traced(checked), traced(lambda: UNCHANGED):
            return self._layers(input_ids, inputs, cache, encodings)

    def _layers(
        self,
        input_ids: torch.Tensor,
        inputs: ForwardInputs,
        cache: KVCache | None,
        encodings: tuple[Encoding, ...],
    ) -> torch.Tensor:
        """The logits of :meth:`forward`, from its checked inputs."""
        b, s = input_ids.shape
        x = self.embed(input_ids) * math.sqrt(self.dim)
        if self._input_encoding is not None:
            x = encodings[self._input_encoding](x, inputs.positions)
        layers = self._layer_encoding
        rotations = rotations_of(encodings, layers, inputs)
        trains = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        shape = AttnShape(
            b, self.n_heads, self.n_kv_heads, s, inputs.context.positions.k_len, self.head_dim
        )
        blocks = cast(Sequence[Block], self.blocks)
        traits = [cast(SelfAttention, layers_of(block)["attn"]).score_traits for block in blocks]
        tables = layer_tables(
            encodings,
            layers,
            traits,
            inputs.context,
            shape,
            causal=self.causal,
            training=trains,
            cached=cache is not None,
        )
        contexts = layer_contexts(inputs, cache, len(layers), s)
        for i, block in enumerate(blocks):
            e = layers[i]
            x = forward_of(block)(
                x,
                encoding=encodings[e],
                rotation=rotations.get(e),
                context=contexts[i],
                causal=self.causal,
                cache=cache,
                layer=i,
                bias=tables.get((e, traits[i])),
            )
        if cache is not None:
            cache.advance(s)
        head = self.embed.weight if self.head is None else self.head.weight
        return F.linear(norm(self.norm, x), head)

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
        compile: bool | str = False,
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
            compile=compile,
        )
