"""The layers of :class:`~posenc.models.TransformerLM`: grouped-query self-attention and the
pre-norm block around it.

Each layer's encoding is handed to it per forward: a rotary one rotates q and k with the
``rotation`` computed once per forward, a bias one goes to :func:`posenc.attention`, with
the bias table the model computed once per forward where it did (Vaswani et al. 2017 for
the block; Ainslie et al. 2023, arXiv:2305.13245, for grouped-query heads). The layer keeps
the rest of its :class:`~posenc.models.spec.LayerSpec`: its window or chunk, its sink
logits (a parameter), its softcap and its query temperature.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from ..attn import AttentionContext, KVCache, StaticKVCache, attention
from ..attn.call import ScoreOptions
from ..attn.checks import check_scale, zero_nonfinite
from ..attn.core import attend
from ..attn.planner import ScoreTraits
from ..base import BiasEncoding, Encoding, InputBias, InputTransforms, RotaryEncoding
from ..config import check_int
from ..rotary import RoPE, XPos
from .activation import GELU
from .calls import forward_of, layers_of, linear, mlp, norm
from .spec import LayerSpec
from .transforms import layer_transforms

__all__ = ["Block", "SelfAttention", "check_layer_args"]

#: a layer's keys and values: side by side in one tensor (keys' heads first), or a pair
KeysValues = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def check_layer_args(
    dim: int, n_heads: int, n_kv_heads: int, spec: LayerSpec | None, scale: float | None
) -> None:
    """Raise a ``TypeError`` or ``ValueError`` naming the argument unless these can build a
    :class:`SelfAttention`: ints >= 1, ``n_heads`` dividing ``dim`` and ``n_kv_heads``
    dividing ``n_heads``, a :class:`LayerSpec` or None, a score scale as
    :func:`~posenc.attn.checks.check_scale` takes it or None."""
    for name, value in (("dim", dim), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        check_int(name, value)
    if dim % n_heads:
        raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if spec is not None and not isinstance(spec, LayerSpec):
        raise TypeError(f"spec must be a LayerSpec or None, got {type(spec).__name__}")
    if scale is not None:
        check_scale(scale, dim // n_heads)


class SelfAttention(nn.Module):
    """Multi-head self-attention with grouped-query heads.

    Args:
        dim: model width; ``n_heads`` must divide it.
        n_heads: query heads.
        n_kv_heads: key/value heads; it must divide ``n_heads``.
        spec: the layer's plan; its ``pattern``, ``softcap`` and ``query_temperature`` are
            kept, and ``sinks`` makes the parameter ``sinks`` (``[n_heads]``, zeros). Its
            encoding is not: the model hands the layer its encoding every forward.
            Default: full attention, nothing else.
        scale: the score scale (``q · kᵀ`` times it, before a bias), a finite number > 0;
            default ``head_dim ** -0.5``.

    Shapes:
        x: ``[batch, seq, dim]`` -> ``[batch, seq, dim]``.
    """

    qkv: nn.Linear
    out: nn.Linear
    sinks: nn.Parameter | None

    def __init__(
        self,
        dim: int,
        n_heads: int,
        n_kv_heads: int,
        spec: LayerSpec | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        check_layer_args(dim, n_heads, n_kv_heads, spec, scale)
        self.n_heads, self.n_kv_heads, self.scale = n_heads, n_kv_heads, scale
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=False)
        self.out = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        spec = LayerSpec() if spec is None else spec
        self.pattern, self.softcap = spec.pattern, spec.softcap
        self.temperature = spec.query_temperature
        # gpt-oss draws them from N(0, 0.02²); zeros: a sink as likely as a key at first
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if spec.sinks else None

    @property
    def score_traits(self) -> ScoreTraits:
        """What besides the encoding decides how a bias runs in this layer (its pattern,
        softcap, whether it has sinks: :func:`~posenc.models.shared.shared_bias`)."""
        return ScoreTraits(self.pattern, self.softcap, self.sinks is not None, True)

    def extra_repr(self) -> str:
        parts = [] if not self.pattern.local else [self.pattern.describe()]
        parts += [] if self.scale is None else [f"scale {self.scale:g}"]
        parts += [] if self.softcap is None else [f"softcap {self.softcap:g}"]
        parts += [] if self.temperature is None else [f"temperature {self.temperature.describe()}"]
        return ", ".join(parts + (["sinks"] if self.sinks is not None else []))

    def forward(
        self,
        x: torch.Tensor,
        *,
        encoding: Encoding,
        rotation: tuple[torch.Tensor, ...] | None,
        context: AttentionContext,
        causal: bool,
        cache: KVCache | None = None,
        layer: int = 0,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend ``x`` to itself (and to the keys and values in ``cache``), with this
        layer's window or chunk, sinks, softcap and query temperature.

        Args:
            x: the normalised residual stream.
            encoding: this layer's encoding; only a bias one is handed to attention.
            rotation: the rotary tables of this forward, or None.
            context: the positions and masks of this forward's attention (with the cached
                keys).
            causal: mask future keys.
            cache: the KV cache to append to, or None.
            layer: this layer's index in ``cache``.
            bias: a bias encoding's table, computed once per forward and shared by the
                layers with this encoding and pattern (``bias=`` of
                :func:`posenc.attention`), or None. An encoding that reads the layer's
                input gets its clock (FoX, :meth:`clock`) or its transforms (PaTH,
                :func:`~posenc.models.transforms.layer_transforms`) here instead.

        Returns:
            ``[batch, seq, dim]``.
        """
        b, s, _ = x.shape
        fused = writes_rotated(encoding, rotation, cache, layer)
        # no host read per layer: a token's NaN key or value is zeroed, so that it cannot
        # reach the rows that may not see it (its own row carries the NaN); keys as they
        # are cached (rotated), values and keys no rotation turns in one pass
        joint = cache is not None and layer in cache.joint  # keys and values in one buffer
        q, kv = self._own_heads(x, encoding, None if fused else rotation, joint)
        if fused:  # rotated while written into the cache, in one launch
            static, rope = cast(StaticKVCache, cache), cast(RoPE, encoding)
            pair = cast(tuple[torch.Tensor, torch.Tensor], rotation)
            q, k, v = static.update_rotated(layer, q, *self._halves(kv), pair, rope.config.layout)
        elif isinstance(encoding, InputTransforms):  # PaTH: each key's transform beside it
            k, v = self._halves(kv)
            k, v, bias, context = layer_transforms(encoding, x, k, v, cache, layer, context)
        elif cache is not None and isinstance(kv, torch.Tensor):  # side by side: one copy
            k, v = cache.update_joint(layer, kv)
        elif cache is not None:
            k, v = cache.update(layer, *kv)
        else:
            k, v = self._halves(kv)
        q = self.temper(q, context)
        if isinstance(encoding, InputBias):
            bias = self.clock(encoding, x, cache, layer)
        scale = check_scale(self.scale, self.head_dim)  # of the heads before PoPE widens them
        if getattr(encoding, "merges_attention", False):  # dca: q and k come unrotated
            out = attention(
                q,
                k,
                v,
                encoding,
                causal=causal,
                context=context,
                window=self.pattern.window,
                chunk=self.pattern.chunk,
                sinks=self.sinks,
                softcap=self.softcap,
                scale=scale,
            )
        else:  # the forward checked every input once: straight to the planner
            biased = cast(BiasEncoding, encoding) if encoding.kind == "bias" else None
            options = ScoreOptions(self.pattern, self.softcap, self.sinks)
            out = attend(
                q, k, v, biased, context, causal=causal, scale=scale, options=options, bias=bias
            )
        # [b, h, s, hd] -> [b, s, h * hd]
        out = out.transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim)
        return linear(layers_of(self)["out"], out)

    @staticmethod
    def clock(
        encoding: InputBias, x: torch.Tensor, cache: KVCache | None, layer: int
    ) -> torch.Tensor:
        """The clock of an encoding that reads the layer's input (FoX's forget gates) for
        the keys this layer's queries see: ``encoding.clock(x)``, continued from the
        cache's last and joined to the cached ones when decoding.

        Shapes:
            x ``[batch, seq, dim]`` -> ``[batch, heads, seq]`` (``[batch, heads,
            cache.visible(layer, seq)]`` with a cache).
        """
        if cache is None:
            return zero_nonfinite(encoding.clock(x))
        return cache.update_clock(layer, zero_nonfinite(encoding.clock(x, cache.last_clock(layer))))

    def project(
        self, x: torch.Tensor, encoding: Encoding, rotation: tuple[torch.Tensor, ...] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The heads' queries, keys and values of ``x``, q and k rotated when ``rotation`` is
        given (keys with ``key=True``, so a cached key keeps its angle).

        Args:
            x: ``[batch, seq, dim]``, the normalised residual stream.
            encoding: this layer's encoding; it must be rotary when ``rotation`` is given.
            rotation: the rotary tables of this forward, or None.

        Returns:
            ``(q, k, v)``: q ``[batch, n_heads, seq, head_dim]``, k and v
            ``[batch, n_kv_heads, seq, head_dim]`` (key heads not repeated).
        """
        sizes = [self.n_heads, self.n_kv_heads, self.n_kv_heads]
        q, k, v = self._qkv(x).split_with_sizes(sizes, dim=1)
        if rotation is None:
            return q, k, v
        rotary = cast(RotaryEncoding, encoding)  # only rotary encodings give a rotation
        return (*rotary.rotate_pair(q, k, rotation), v)

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        """The heads of q, k and v in a row: ``[batch, seq, dim]`` -> ``[batch, n_heads + 2 ·
        n_kv_heads, seq, head_dim]`` (a view of one projection)."""
        b, s, _ = x.shape
        heads = self.n_heads + 2 * self.n_kv_heads
        return linear(layers_of(self)["qkv"], x).view(b, s, heads, self.head_dim).transpose(1, 2)

    def _own_heads(
        self,
        x: torch.Tensor,
        encoding: Encoding,
        rotation: tuple[torch.Tensor, ...] | None,
        joint: bool,
    ) -> tuple[torch.Tensor, KeysValues]:
        """:meth:`forward`'s q and its keys and values, keys turned by ``rotation`` (made for
        these heads' positions by the model: nothing checked again), both through
        :func:`~posenc.attn.checks.zero_nonfinite` after it: side by side, ``[batch, 2 ·
        n_kv_heads, seq, head_dim]`` (one call) where the projection holds them so (no
        rotation) or they go to a cache that does (``joint``: one copy, for a
        concatenation), else a pair (PoPE's keys are twice as wide)."""
        qkv = self._qkv(x)
        heads, kv_heads = self.n_heads, self.n_kv_heads
        if rotation is None:
            q, kv = qkv.split_with_sizes([heads, 2 * kv_heads], dim=1)
            return q, zero_nonfinite(kv)
        rotary = cast(RotaryEncoding, encoding)  # only rotary encodings give a rotation
        qk, v = qkv.split_with_sizes([heads + kv_heads, kv_heads], dim=1)
        turned = rotary._rotate_heads(qk, rotation)  # q's and k's heads in one pass
        if turned is None:
            q, k = qk.split_with_sizes([heads, kv_heads], dim=1)
            q, k = rotary._rotate_pair(q, k, rotation)
        else:
            q, k = turned.split_with_sizes([heads, kv_heads], dim=1)
        if joint and k.shape[-1] == v.shape[-1]:
            return q, zero_nonfinite(torch.cat((k, v), dim=1))
        return q, (zero_nonfinite(k), zero_nonfinite(v))

    def _halves(self, kv: KeysValues) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of ``kv`` (:meth:`_own_heads`), as views."""
        if not isinstance(kv, torch.Tensor):
            return kv
        k, v = kv.split_with_sizes([self.n_kv_heads, self.n_kv_heads], dim=1)
        return k, v

    def temper(self, q: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """``q`` scaled by this layer's query temperature of the queries' positions (the
        context's, which order the mask: Llama 4's ``cache_position`` for default ones), or
        ``q`` itself without one (:mod:`posenc.attn.temperature`).

        Shapes:
            q: ``[batch, n_heads, seq, head_dim]`` -> the same, in its dtype.
        """
        if self.temperature is None:
            return q
        factor = self.temperature(context.positions.q)  # [s] or [b, s], float32
        factor = factor.view(-1, 1, q.shape[2], 1)  # [1 | b, 1, s, 1]
        return (q * factor).to(q.dtype)


def writes_rotated(
    encoding: Encoding,
    rotation: tuple[torch.Tensor, ...] | None,
    cache: KVCache | None,
    layer: int,
) -> bool:
    """Whether a layer rotates its new keys while writing them into ``cache`` in one
    Triton launch (:meth:`~posenc.StaticKVCache.update_rotated`): RoPE (and its M-RoPE,
    p-RoPE) created with ``kernel="triton"``, rotating a head's first channels (not xPos,
    whose keys scale apart), a static cache that keeps every key of ``layer``, and no
    gradient (decoding)."""
    return (
        rotation is not None
        and isinstance(cache, StaticKVCache)
        and cache.keep[layer] is None
        and isinstance(encoding, RoPE)
        and not isinstance(encoding, XPos)
        and encoding.config.kernel == "triton"
        and encoding.config.rotary_at == "start"
        and not torch.is_grad_enabled()
    )


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.

    Args:
        dim: model width.
        n_heads: query heads.
        n_kv_heads: key/value heads.
        mlp_ratio: hidden width of the MLP as a multiple of ``dim``.
        spec: the layer's plan (see :class:`SelfAttention`).
        scale: the score scale (see :class:`SelfAttention`).

    Shapes:
        x: ``[batch, seq, dim]`` -> ``[batch, seq, dim]``.
    """

    attn_norm: nn.RMSNorm
    attn: SelfAttention
    mlp_norm: nn.RMSNorm
    mlp: nn.Sequential

    def __init__(
        self,
        dim: int,
        n_heads: int,
        n_kv_heads: int,
        mlp_ratio: int,
        spec: LayerSpec | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        check_int("mlp_ratio", mlp_ratio)
        check_layer_args(dim, n_heads, n_kv_heads, spec, scale)  # before any weight is made
        self.attn_norm = nn.RMSNorm(dim)
        self.attn = SelfAttention(dim, n_heads, n_kv_heads, spec, scale)
        self.mlp_norm = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim, bias=False),
            GELU(),
            nn.Linear(mlp_ratio * dim, dim, bias=False),
        )

    def forward(
        self,
        x: torch.Tensor,
        *,
        encoding: Encoding,
        rotation: tuple[torch.Tensor, ...] | None,
        context: AttentionContext,
        causal: bool,
        cache: KVCache | None = None,
        layer: int = 0,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x`` through the block; the keywords are those of :meth:`SelfAttention.forward`."""
        layers = layers_of(self)
        x = x + forward_of(layers["attn"])(
            norm(layers["attn_norm"], x),
            encoding=encoding,
            rotation=rotation,
            context=context,
            causal=causal,
            cache=cache,
            layer=layer,
            bias=bias,
        )
        return x + mlp(layers["mlp"], norm(layers["mlp_norm"], x))

    def projections(self) -> tuple[tuple[nn.Linear, nn.Linear], tuple[nn.Linear, nn.Linear]]:
        """``((qkv, mlp in), (attention out, mlp out))``: the linears that read the residual
        stream and those that write back to it (GPT-2 scales the init of the second)."""
        mlp_in, mlp_out = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        return (self.attn.qkv, mlp_in), (self.attn.out, mlp_out)
