"""Scaled dot-product attention with a positional encoding plugged in, and a KV cache.

:func:`attention` is the one place where rotary and bias encodings meet attention: rotary
encodings rotate q and k, bias encodings add their term to the scores, additive encodings
belong at the input and are refused here, and ``none`` adds nothing. It runs on
``torch.nn.functional.scaled_dot_product_attention`` (fused kernels, grouped-query heads).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import Encoding
from .flex import flex_attention, flex_available
from .masks import Masks, open_dead_rows, zero_dead_rows
from .positions import arange, causal_mask, check_batch, check_positions

__all__ = ["BACKENDS", "KVCache", "attention"]

BACKENDS = ("auto", "flex", "sdpa", "math")
#: the number of scores per head (q_len * k_len) from which ``auto`` uses flex attention
FLEX_MIN_SCORES = 256 * 256


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating-point tensor, got {got}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be [batch, heads, seq, head_dim], got shape {tuple(t.shape)}"
            )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if 0 in t.shape:
            raise ValueError(
                f"{name} must have at least one batch row, head, position and head_dim "
                f"channel, got shape {tuple(t.shape)}"
            )
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must have the same heads and length, got {k.shape}, {v.shape}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(
            f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k head_dim differ: {q.shape[-1]} vs {k.shape[-1]}")


def _check_scale(scale: float | None, head_dim: int) -> float:
    """The score scale: ``1/sqrt(head_dim)`` by default, else a finite number > 0."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    return float(scale)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: Encoding | None = None,
    q_positions: torch.Tensor | None = None,
    k_positions: torch.Tensor | None = None,
    causal: bool = True,
    scale: float | None = None,
    backend: str = "auto",
    key_padding_mask: torch.Tensor | None = None,
    segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention of ``q`` over ``k, v`` with a positional encoding.

    Args:
        q: ``[batch, heads, q_len, head_dim]``.
        k, v: ``[batch, kv_heads, k_len, head_dim]``; ``heads`` a multiple of ``kv_heads``
            (grouped-query attention).
        encoding: a ``rotary`` or ``bias`` encoding, a ``none`` encoding, or None.
        q_positions, k_positions: ``[len]`` or ``[batch, len]``. By default the queries are
            the last ``q_len`` of the ``k_len`` keys (``arange(k_len - q_len, k_len)`` and
            ``arange(k_len)``): the layout of a KV cache during decoding. A rotary encoding
            may take positions of its own shape (grid coordinates ``[len, 2]``, M-RoPE's
            ``[3, batch, len]``); those rotate q and k only, and the causal mask follows the
            token order.
        causal: a query sees the keys at its own position and before.
        scale: the score scale, default ``1/sqrt(head_dim)``. A bias is added after scaling
            (ALiBi's bias is not divided by ``sqrt(head_dim)``).
        backend: for bias encodings, ``"auto"`` (the fastest exact one), ``"flex"`` (flex
            attention: no ``[heads, L, L]`` tensor), ``"sdpa"`` (SDPA with the materialised
            bias) or ``"math"`` (explicit softmax in float32). Other kinds always use SDPA.
        key_padding_mask: ``[batch, k_len]`` bool, True for a real token: keys at False
            are hidden from every query.
        segment_ids: ``[batch, seq]`` integer document ids of packed sequences: a query
            sees only keys of its own document. With a KV cache (``q_len != k_len``) pass
            ``(q_segment_ids, k_segment_ids)``, ``[batch, q_len]`` and ``[batch, k_len]``.
            Give each document positions of its own too
            (:func:`posenc.positions.from_segments`).

    A query that may see no key at all (a pad query, say) gets zeros, never NaN, and no
    gradient.

    Returns:
        ``[batch, heads, q_len, head_dim]`` in the dtype of ``q``.
    """
    _check_qkv(q, k, v)
    if encoding is not None and not isinstance(encoding, Encoding):
        raise TypeError(
            f"encoding must be an Encoding (e.g. posenc.create({encoding!r}, ...)) or None, "
            f"got {type(encoding).__name__}"
        )
    q_len, k_len = q.shape[2], k.shape[2]
    kind = None if encoding is None else encoding.kind
    if kind == "rotary":
        # the encoding checks its own positions (grid coordinates, M-RoPE's [3, batch, seq])
        # and fills in its own defaults; the mask takes their sequence order, if they have one
        q, k = encoding(q, k, positions=q_positions, k_positions=k_positions)
        if q_positions is not None:
            k_positions = q_positions if k_positions is None else k_positions
            q_positions = encoding.causal_positions(q_positions)
            k_positions = encoding.causal_positions(k_positions)
            if q_positions is None or k_positions is None:
                q_positions = k_positions = None  # no order: the mask follows the index
    explicit = q_positions is not None or k_positions is not None
    if q_positions is None:
        if k_positions is not None:
            raise ValueError("k_positions given without q_positions: pass both")
        if q_len > k_len:
            raise ValueError(
                f"q has {q_len} positions but k only {k_len}: pass q_positions and k_positions"
            )
        q_positions = arange(q_len, device=q.device, offset=k_len - q_len)
    else:
        q_positions = check_positions(
            q_positions, seq_len=q_len, name="q_positions", device=q.device
        )
    if k_positions is None:
        k_positions = arange(k_len, device=k.device)
    else:
        k_positions = check_positions(
            k_positions, seq_len=k_len, name="k_positions", device=k.device
        )
    check_batch(q_positions, q.shape[0], "q_positions")
    check_batch(k_positions, q.shape[0], "k_positions")
    masks = Masks.build(key_padding_mask, segment_ids, q.shape[0], q_len, k_len)

    scale = _check_scale(scale, q.shape[-1])
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if kind != "bias" and backend not in ("auto", "sdpa"):
        raise ValueError(f"backend={backend!r} applies to bias encodings only; this runs on SDPA")
    if kind == "bias":
        return _bias_attention(
            q, k, v, encoding, q_positions, k_positions, explicit, causal, scale, backend, masks
        )
    if kind == "additive":
        raise ValueError(
            f"{encoding.info.name!r} is an additive encoding: add it to the token embeddings "
            "(enc(x)) before the first layer instead of passing it to attention"
        )
    if kind not in (None, "none", "rotary"):
        raise ValueError(f"unknown encoding kind {kind!r}")

    mask: torch.Tensor | None = None
    is_causal = False
    if masks is not None:
        mask, dead = open_dead_rows(masks.dense(q_positions, k_positions, causal))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
        return zero_dead_rows(out, dead)
    if causal:
        if explicit:
            mask = causal_mask(q_positions, k_positions)
        elif q_len == k_len:
            is_causal = True  # the fused kernels' own top-left causal mask
        elif q_len > 1:
            mask = causal_mask(q_positions, k_positions)  # bottom-right: cached keys first
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )


def _bias_attention(
    q, k, v, encoding, q_positions, k_positions, explicit, causal, scale, backend, masks
):
    """Attention with a bias encoding, on the fastest exact backend.

    ``auto`` tries the encoding's own fused path, then flex attention for sequences of at
    least ``FLEX_MIN_SCORES`` scores per head (below that, compiling buys nothing), then SDPA
    with the materialised bias (decoding: one query against N keys costs O(N) per head).
    Encodings that add to the values (Shaw) always take the math path. Padding and segment
    masks (``masks``) reach flex as a ``mask_mod`` and the other paths as a dense mask.
    """
    if q.shape[1] != encoding.n_heads:
        raise ValueError(
            f"q has {q.shape[1]} heads but the encoding {type(encoding).__name__} has "
            f"n_heads={encoding.n_heads}"
        )
    if encoding.adds_to_values:
        if backend not in ("auto", "math"):
            raise ValueError(
                f"{encoding.info.name!r} adds to the values: only backend='math' runs it"
            )
        backend = "math"
    # compiled flex attention has no backward on the CPU (torch 2.13): torch refuses q, k, v
    # that require grad (even under no_grad), and inductor fails on a score_mod whose
    # captured tables need gradients. Training on the CPU uses SDPA.
    needs_grad = any(t.requires_grad for t in (q, k, v)) or (
        torch.is_grad_enabled() and any(p.requires_grad for p in encoding.parameters())
    )
    cpu_training = q.device.type == "cpu" and needs_grad
    if backend == "flex" and cpu_training:
        raise ValueError(
            "compiled flex attention has no backward on the CPU: use backend='sdpa' (or "
            "'auto'), or call under torch.no_grad() with inputs that do not require grad"
        )
    allowed = dead = None  # the dense mask, built only where a path needs it
    if backend == "auto":
        flex = not cpu_training and _flex_first(q, k)
        # with padding or segments, flex comes first: its block mask skips whole blocks,
        # where the encoding's fused path would need the dense mask
        if masks is None or not flex:
            if masks is not None:
                allowed, dead = open_dead_rows(masks.dense(q_positions, k_positions, causal))
            fused = encoding.fused_attention(
                q, k, v, q_positions, k_positions, causal, scale, mask=allowed
            )
            if fused is not None:
                return zero_dead_rows(fused, dead)
        backend = "flex" if flex else "sdpa"
    if backend == "flex":
        q_offset = k.shape[2] - q.shape[2]
        qp, kp = (q_positions, k_positions) if explicit else (None, None)  # None: default
        mod = encoding.score_mod(qp, kp, q=q, q_offset=q_offset, scale=scale)
        mask_mod = None if masks is None else masks.mask_mod(qp, kp, q_offset, causal)
        return flex_attention(q, k, v, mod, qp, kp, causal, scale, mask_mod=mask_mod)
    if masks is not None and allowed is None:
        allowed, dead = open_dead_rows(masks.dense(q_positions, k_positions, causal))
    elif causal and allowed is None:
        allowed = causal_mask(q_positions, k_positions)
    bias = encoding.bias(q_positions, k_positions, q=q, scale=scale)  # [(b,) h, q_len, k_len]
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    if backend == "sdpa":
        # a 4-D mask keeps CPU SDPA on its fast kernel (3-D falls back, 2-6x slower); the
        # CPU kernel takes a float32 mask with bf16/fp16 inputs, so the bias is not rounded
        mask = bias if bias.dim() == 4 else bias.unsqueeze(0)
        cpu_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        mask = mask.to(cpu_dtype if q.device.type == "cpu" else q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
        return zero_dead_rows(out, dead)
    out = _math_attention(q, k, v, bias, scale, encoding, q_positions, k_positions)
    return zero_dead_rows(out, dead)


def _flex_first(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``auto`` takes flex attention: on a device it runs on, for at least
    ``FLEX_MIN_SCORES`` scores per head (below that, compiling buys nothing)."""
    return q.shape[2] * k.shape[2] >= FLEX_MIN_SCORES and flex_available(q.device)


def _math_attention(q, k, v, bias, scale, encoding, q_positions, k_positions):
    """softmax(q kᵀ · scale + bias) v in float32, plus the encoding's value term if any."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [b, h, k_len, d]
    v = v.repeat_interleave(group, dim=1)
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale + bias.to(dtype)
    # a query that sees no key gets zeros, as from the SDPA and flex kernels (not NaN)
    probs = scores.softmax(dim=-1).nan_to_num(0.0)  # [b, h, q_len, k_len]
    out = probs @ v.to(dtype)
    if encoding.adds_to_values:
        out = out + encoding.value_term(probs, q_positions, k_positions).to(dtype)
    return out.to(q.dtype)


class KVCache:
    """Keys, values and positions of every layer, preallocated for incremental decoding.

    Each forward step writes its new keys at ``length`` in every layer (:meth:`update`),
    then advances ``length`` once (:meth:`advance`). Rotary encodings rotate keys before
    they are cached, so cached keys keep the rotation of their own position.

    Shapes:
        keys, values: ``[n_layers, batch, kv_heads, max_seq_len, head_dim]``;
        positions: ``[batch, max_seq_len]``.
    """

    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        max_seq_len: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (n_layers, batch, kv_heads, max_seq_len, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.positions = torch.zeros(batch, max_seq_len, device=device, dtype=torch.long)
        self.max_seq_len = max_seq_len
        self.length = 0
        #: set once explicit positions were cached: attention then needs them all
        self.explicit_positions = False

    def check_batch(self, batch: int) -> None:
        """Raise unless this cache holds ``batch`` sequences."""
        if self.keys.shape[1] != batch:
            raise ValueError(
                f"cache holds {self.keys.shape[1]} sequences but input_ids has {batch}: "
                "make one with model.new_cache(batch, max_seq_len)"
            )

    def _end(self, n: int) -> int:
        end = self.length + n
        if end > self.max_seq_len:
            raise ValueError(
                f"KV cache holds max_seq_len={self.max_seq_len} positions; "
                f"{self.length} are used and {n} more do not fit"
            )
        return end

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``[batch, kv_heads, n, head_dim]`` after the cached ones and return
        all keys and values so far, ``[batch, kv_heads, length + n, head_dim]``."""
        end = self._end(k.shape[2])
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def update_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Store the new tokens' positions (``[n]`` or ``[batch, n]``, integers) and return
        all positions so far, ``[batch, length + n]``."""
        if positions.is_floating_point():
            raise TypeError(f"KVCache stores integer positions, got {positions.dtype}")
        end = self._end(positions.shape[-1])
        self.positions[:, self.length : end] = positions
        return self.positions[:, :end]

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as filled, once every layer has been updated."""
        self.length = self._end(n)
