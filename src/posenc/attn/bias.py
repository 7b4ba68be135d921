"""The backends of bias encodings: the fused linear-bias path, flex attention, SDPA, math.

A bias encoding adds one value per head and (query, key) pair to the scores. ``auto``
picks the fastest exact backend from what the encoding declares (``linear_slopes``,
``shift_invariant``, ``relative_tables``, ``adds_to_values``) and from the inputs (device,
sizes, gradients), never from its name:

- the fused linear-bias path (:mod:`posenc.attn.linear_bias`) when the bias is
  ``-m_h (i - j)`` and it applies (CPU, not compiling, affordable width);
- inference on the CPU with a shift-invariant bias over the default positions, SDPA's
  fused kernel by blocks of queries, the bias rows sliced from its ``2L - 1`` distances
  (:mod:`posenc.attn.bias_blocks`; the training table is built from them too);
- flex attention (:mod:`posenc.attn.flex`) from ``FLEX_MIN_SCORES`` scores per head,
  where it runs and no gradient is needed on the CPU;
- training on the CPU, Shaw's attention (``relative_tables``) blockwise, forward and
  backward (:mod:`posenc.attn.shaw_grad`), without padding or segment masks;
- training on the CPU, the fused CPU flash kernel with the materialised bias and a
  blockwise backward (:mod:`posenc.attn.bias_grad`: no ``[batch, heads, L, L]``);
- else SDPA with the materialised ``[heads, q_len, k_len]`` bias.

``math`` (explicit softmax in float32) serves encodings that add to the values (Shaw)
elsewhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..base import BiasEncoding
from ..functional.dtypes import math_dtype
from ..positions import causal_mask
from .bias_blocks import blockwise_bias_attention, shift_table
from .bias_grad import bias_flash_attention, bias_flash_available
from .flex import flex_attention, flex_available
from .linear_bias import fused_linear_bias
from .masks import Masks, open_dead_rows, zero_dead_rows
from .shaw_grad import shaw_attention

__all__ = ["BACKENDS", "FLEX_MIN_SCORES", "bias_attention"]

BACKENDS = ("auto", "flex", "sdpa", "math")
#: the number of scores per head (q_len * k_len) from which ``auto`` uses flex attention
FLEX_MIN_SCORES = 256 * 256


def bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    explicit: bool,
    causal: bool,
    scale: float,
    backend: str,
    masks: Masks | None,
    table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention with a bias encoding, on the fastest exact backend.

    ``auto`` tries the fused linear-bias path, then flex attention for sequences of at
    least ``FLEX_MIN_SCORES`` scores per head (below that, compiling buys nothing), then
    SDPA with the materialised bias (decoding: one query against N keys costs O(N) per
    head); training on the CPU, SDPA's flash kernel with the bias and a blockwise backward
    (:func:`~posenc.attn.bias_grad.bias_flash_attention`) instead, and Shaw's
    attention its own blockwise path (:func:`~posenc.attn.shaw_grad.shaw_attention`,
    for encodings with ``relative_tables``, without masks). Encodings that add to the
    values (Shaw) otherwise take the math path. Padding and segment masks
    (``masks``) reach flex as a ``mask_mod`` and the other paths as a dense mask.

    Args:
        q, k, v, scale, backend: as :func:`posenc.attention` (checked there).
        encoding: a bias encoding with ``n_heads`` equal to the query heads.
        q_positions, k_positions: ``[len]`` or ``[batch, len]``, checked.
        explicit: whether the caller gave the positions (flex then reads them; else its
            ``score_mod`` uses the indices and a cached block mask).
        causal: mask keys after their query.
        masks: padding and segment masks, or None.
        table: the materialised bias for these positions (``encoding.bias(q_positions,
            k_positions)``, checked by :func:`posenc.attention`), computed once by the
            caller and shared by its layers; None: computed here where a path needs it.

    Shapes:
        q ``[batch, heads, q_len, d]``, k, v ``[batch, kv_heads, k_len, d]``.

    Returns:
        ``[batch, heads, q_len, d]`` in the dtype of ``q``.
    """
    if q.shape[1] != encoding.n_heads:
        raise ValueError(
            f"q has {q.shape[1]} heads but the encoding {type(encoding).__name__} has "
            f"n_heads={encoding.n_heads}"
        )
    if encoding.adds_to_values and backend not in ("auto", "math"):
        raise ValueError(f"{encoding.info.name!r} adds to the values: only backend='math' runs it")
    # compiled flex attention has no backward on the CPU (torch 2.13): torch refuses q, k, v
    # that require grad (even under no_grad), and inductor fails on a score_mod whose
    # captured tables need gradients. Training on the CPU uses SDPA.
    needs_grad = any(t.requires_grad for t in (q, k, v)) or (
        torch.is_grad_enabled()
        and (
            any(p.requires_grad for p in encoding.parameters())
            or (table is not None and table.requires_grad)
        )
    )
    cpu_training = q.device.type == "cpu" and needs_grad
    if backend == "auto" and cpu_training and masks is None:
        out = _relative(q, k, v, encoding, q_positions, k_positions, causal, scale)
        if out is not None:
            return out
    if encoding.adds_to_values:
        backend = "math"
    if backend == "flex" and cpu_training:
        raise ValueError(
            "compiled flex attention has no backward on the CPU: use backend='sdpa' (or "
            "'auto'), or call under torch.no_grad() with inputs that do not require grad"
        )
    allowed = dead = None  # the dense mask, built only where a path needs it
    chunked = False  # the flash kernel with a blockwise backward (training on the CPU)
    if backend == "auto":
        flex = not cpu_training and _flex_first(q, k)
        # with padding or segments, flex comes first: its block mask skips whole blocks,
        # where the fused linear-bias path would need the dense mask
        if masks is None or not flex:
            if masks is not None:
                allowed, dead = open_dead_rows(masks.dense(q_positions, k_positions, causal))
            fused = fused_linear_bias(
                encoding, q, k, v, q_positions, k_positions, causal, scale, mask=allowed
            )
            if fused is not None:
                return zero_dead_rows(fused, dead)
        if masks is None and not needs_grad and _by_distance(encoding, q, k, explicit):
            return blockwise_bias_attention(q, k, v, encoding, scale, causal)
        backend = "flex" if flex else "sdpa"
        chunked = cpu_training and not torch.compiler.is_compiling() and bias_flash_available()
    if backend == "flex":
        q_offset = k.shape[2] - q.shape[2]
        qp, kp = (q_positions, k_positions) if explicit else (None, None)  # None: default
        mod = encoding.score_mod(qp, kp, q=q, q_offset=q_offset, scale=scale)
        mask_mod = None if masks is None else masks.mask_mod(qp, kp, q_offset, causal)
        return flex_attention(q, k, v, mod, qp, kp, causal, scale, mask_mod=mask_mod)
    if table is None and chunked and _by_distance(encoding, q, k, explicit):
        table = shift_table(encoding, q.shape[2], q.device)  # 2L - 1 values, not L²
    elif table is None:
        table = encoding.bias(q_positions, k_positions, q=q, scale=scale)  # [(b,) h, q, k]
    if chunked:
        opened = None if allowed is None else (allowed, dead)
        return _chunked(q, k, v, table, q_positions, k_positions, causal, scale, masks, opened)
    if masks is not None and allowed is None:
        allowed, dead = open_dead_rows(masks.dense(q_positions, k_positions, causal))
    elif causal and allowed is None:
        allowed = causal_mask(q_positions, k_positions)
    bias = table
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    if backend == "sdpa":
        # a 4-D mask keeps CPU SDPA on its fast kernel (3-D falls back, 2-6x slower); the
        # CPU kernel takes a float32 mask with bf16/fp16 inputs, so the bias is not rounded
        mask = bias if bias.dim() == 4 else bias.unsqueeze(0)  # [b | 1, h, q_len, k_len]
        mask = mask.to(math_dtype(q.dtype) if q.device.type == "cpu" else q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
        return zero_dead_rows(out, dead)
    out = _math_attention(q, k, v, bias, scale, encoding, q_positions, k_positions)
    return zero_dead_rows(out, dead)


def _chunked(q, k, v, bias, q_positions, k_positions, causal, scale, masks, opened):
    """:func:`~posenc.attn.bias_grad.bias_flash_attention` with the masks folded into
    the bias as ``-inf``; the causal mask by index (no fold, the kernel skips the blocks
    above the diagonal) where the positions order keys as their index does.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]``, bias ``[(b,) h, q_len, k_len]``;
        opened: ``(allowed, dead)`` of :func:`open_dead_rows` for ``masks`` if built
        already, else None -> ``[b, h, q_len, d]``.
    """
    by_index = causal and _index_order(q_positions, k_positions)
    dead = None
    if masks is not None or (causal and not by_index):
        if opened is None:
            dense = (
                causal_mask(q_positions, k_positions)
                if masks is None
                else masks.dense(q_positions, k_positions, causal)
            )
            opened = open_dead_rows(dense)
        allowed, dead = opened
        bias = bias.masked_fill(~allowed, float("-inf"))
    out = bias_flash_attention(q, k, v, bias, scale, by_index)
    return zero_dead_rows(out, dead)


def _relative(q, k, v, encoding, q_positions, k_positions, causal, scale):
    """Shaw's attention blockwise (:func:`~posenc.attn.shaw_grad.shaw_attention`), for
    an encoding with :meth:`~posenc.base.BiasEncoding.relative_tables`, where it runs: not
    compiling, and under the causal mask only with keys in index order; else None.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]`` -> ``[b, h, q_len, d]`` or None.
    """
    tables = encoding.relative_tables()
    if tables is None or torch.compiler.is_compiling():
        return None
    key_table, value_table, max_distance = tables
    if causal and not _index_order(q_positions, k_positions):
        return None
    return shaw_attention(
        q, k, v, key_table, value_table, max_distance, q_positions, k_positions, scale, causal
    )


def _index_order(q_positions: torch.Tensor, k_positions: torch.Tensor) -> bool:
    """Whether ``k_position <= q_position`` is ``k_index <= q_index``: the same positions
    for queries and keys, strictly increasing (reads them: not under compile)."""
    if q_positions.shape != k_positions.shape or not torch.equal(q_positions, k_positions):
        return False
    return q_positions.shape[-1] < 2 or bool((q_positions.diff(dim=-1) > 0).all())


def _by_distance(encoding: BiasEncoding, q: torch.Tensor, k: torch.Tensor, explicit: bool) -> bool:
    """Whether the bias over these default positions (``arange(L)`` for both) is computed
    from its ``2L - 1`` distances (:mod:`~posenc.attn.bias_blocks`): a shift-invariant
    encoding on the CPU, ``q_len == k_len``, not while compiling (flex is fused there)."""
    return (
        encoding.shift_invariant
        and q.device.type == "cpu"
        and not explicit
        and q.shape[2] == k.shape[2]
        and not torch.compiler.is_compiling()
    )


def _flex_first(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``auto`` takes flex attention: on a device it runs on, for at least
    ``FLEX_MIN_SCORES`` scores per head (below that, compiling buys nothing)."""
    return q.shape[2] * k.shape[2] >= FLEX_MIN_SCORES and flex_available(q.device)


def _math_attention(q, k, v, bias, scale, encoding, q_positions, k_positions):
    """softmax(q kᵀ · scale + bias) v in float32 (float64 for float64 inputs), plus the
    encoding's value term if any.

    Shapes:
        q ``[b, h, q_len, d]``, k, v ``[b, kv_h, k_len, d]``, bias ``[(b,) h, q_len, k_len]``
        -> ``[b, h, q_len, d]`` in the dtype of ``q``.
    """
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [b, h, k_len, d]
    v = v.repeat_interleave(group, dim=1)
    dtype = math_dtype(q.dtype)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale + bias.to(dtype)
    # a query that sees no key gets zeros, as from the SDPA and flex kernels (not NaN)
    probs = scores.softmax(dim=-1).nan_to_num(0.0)  # [b, h, q_len, k_len]
    out = probs @ v.to(dtype)
    if encoding.adds_to_values:
        out = out + encoding.value_term(probs, q_positions, k_positions).to(dtype)
    return out.to(q.dtype)
