"""ALiBi, attention with linear biases (Press et al. 2022, "Train Short, Test Long",
arXiv:2108.12409).

No positional embedding anywhere: each head adds ``-m_h · (i - j)`` to the score of query
``i`` and key ``j``, after the ``1/sqrt(d)`` scaling (the bias is never scaled), with fixed
per-head slopes ``m_h``. For ``n`` a power of two the slopes are the geometric sequence
``2^(-8/n), 2^(-16/n), ..., 2^(-8)``; for other ``n`` they are the ``c`` slopes of the
closest lower power of two ``c``, then the even-indexed slopes (0, 2, 4, ...) of the ``2c``
sequence, ``n - c`` of them (the paper's reference code; BLOOM's ``build_alibi_tensor``).

:func:`alibi_sdpa` runs causal ALiBi inside the fused kernels of
``torch.nn.functional.scaled_dot_product_attention`` (see its docstring for the derivation
and the precision argument).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..positions import causal_mask

__all__ = [
    "ALIBI_BLOCK_BIAS",
    "ALIBI_SMALL_Q",
    "ALIBI_SPLIT_GAIN",
    "alibi_bias",
    "alibi_blocks",
    "alibi_runs",
    "alibi_sdpa",
    "alibi_slope",
    "alibi_slopes",
]

#: the largest |bias| the fused path lets a query see at its centring point (see
#: :func:`alibi_sdpa`): float32 rounds the fused scores to ~2^-24 · 64 ≈ 4e-6
ALIBI_BLOCK_BIAS = 64.0
#: below this many queries :func:`alibi_sdpa` adds the materialised bias instead (decoding:
#: a ``[heads, q_len, k_len]`` bias is smaller than the padded copies of k and v)
ALIBI_SMALL_Q = 32
#: :func:`alibi_runs` makes two SDPA calls only when that cuts the total width by this factor
ALIBI_SPLIT_GAIN = 1.1


def alibi_slope(head: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The slope of each head index in ``head``, elementwise, for a model of ``n_heads``.

    With ``c`` the largest power of two <= ``n_heads``: ``2^(-8 (h + 1) / c)`` for
    ``h < c``, else ``2^(-4 (2 (h - c) + 1) / c)`` (the odd powers of the ``2c`` sequence).
    Every exponent is exact in binary, so the result is ``exp2`` rounded once to ``head``'s
    floating dtype (pass float64 indices and cast for correctly rounded float32 slopes).

    Shapes:
        head: ``[...]`` floating head indices in ``[0, n_heads)`` -> ``[...]``.
    """
    c = 1 << (n_heads.bit_length() - 1)
    first = (head + 1) * (-8.0 / c)
    extra = (2 * (head - c) + 1) * (-4.0 / c)
    return torch.exp2(torch.where(head < c, first, extra))


def alibi_slopes(
    n_heads: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The ALiBi slopes of ``n_heads`` heads (8 heads: 1/2, 1/4, ..., 1/256).

    Computed in float64 (the exponents are exact and ``exp2`` is rounded once), then cast
    to ``dtype``: float64 by default, so ``.float()`` gives correctly rounded float32 values.

    Shapes:
        returns ``[n_heads]``.
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1, got {n_heads!r}")
    heads = torch.arange(n_heads, device=device, dtype=torch.float64)
    return alibi_slope(heads, n_heads).to(dtype)


def alibi_bias(
    slope: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    symmetric: bool = False,
) -> torch.Tensor:
    """The ALiBi bias ``-slope · (q_pos - k_pos)``, or ``-slope · |q_pos - k_pos|`` when
    ``symmetric`` (bidirectional encoders). Farther keys always get lower scores.

    The causal form is meant for causal attention: a key after the query (``k_pos > q_pos``)
    would get a positive bias growing with distance. Integer positions are subtracted
    exactly before the cast to ``slope.dtype``; differentiable in ``slope`` and in floating
    positions.

    Shapes:
        slope, q_pos, k_pos: broadcastable -> their broadcast shape, ``slope.dtype``.
    """
    if q_pos.is_floating_point() or k_pos.is_floating_point():
        distance = q_pos.to(slope.dtype) - k_pos.to(slope.dtype)
    else:
        distance = (q_pos - k_pos).to(slope.dtype)
    if symmetric:
        distance = distance.abs()
    return -slope * distance


def alibi_blocks(slopes: list[float], span: float, max_bias: float = ALIBI_BLOCK_BIAS) -> list[int]:
    """How many query blocks :func:`alibi_sdpa` centres each head on: the fewest blocks of
    at most ``2 · max_bias / slope`` positions that cover ``span`` query positions (0 for a
    zero slope, which needs no coordinate)."""
    blocks = []
    for m in slopes:
        if m == 0:
            blocks.append(0)
            continue
        length = max(1, math.floor(2 * max_bias / m))
        blocks.append(max(1, math.ceil(span / length)))
    return blocks


def alibi_runs(blocks: list[int], group: int, head_dim: int) -> list[tuple[list[int], int]]:
    """How :func:`alibi_sdpa` splits the heads into SDPA calls: at most two runs of
    key/value heads, split where the total padded width is least.

    The CPU kernel's cost steps with the head width in multiples of 8 (65 to 72 cost the
    same, ~1.1x of 64), so each run's width is rounded up to one and the spare columns
    become more blocks, for free precision. The kernel splits each call's work evenly by
    (head, query block) across its threads, so a call over few heads leaves threads idle
    (causal blocks differ in cost): two calls only when they save a tenth of the total
    width, never one call per block count.

    Args:
        blocks: per query head, from :func:`alibi_blocks`.
        group: query heads per key/value head.
        head_dim: the width before padding.

    Returns:
        ``[(kv_head_indices, n_blocks), ...]``, most blocks first.
    """

    def extra(need: int) -> int:  # the blocks of the width rounded up to a multiple of 8
        return 0 if need == 0 else -(-(head_dim + need) // 8) * 8 - head_dim

    per_kv = [max(blocks[g : g + group]) for g in range(0, len(blocks), group)]
    order = sorted(range(len(per_kv)), key=lambda g: -per_kv[g])  # most blocks first
    needs = [extra(per_kv[g]) for g in order]

    def width(split: int) -> int:
        rest = needs[split] if split < len(needs) else 0
        return split * (head_dim + needs[0]) + (len(needs) - split) * (head_dim + rest)

    split = min(range(1, len(needs) + 1), key=lambda s: (width(s), -s))
    if width(split) * ALIBI_SPLIT_GAIN > width(len(needs)):
        split = len(needs)  # one call unless two save a tenth of the padding work
    runs = [(sorted(order[:split]), needs[0])]
    if split < len(needs):
        runs.append((sorted(order[split:]), needs[split]))
    return runs


def _mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
    """The causal mask as ``(attn_mask, is_causal)`` for SDPA, with the cheapest form: the
    kernel's own causal mask when queries and keys are the same increasing positions, none
    when every key is at or before every query (decoding), else a boolean mask."""
    same = q_pos.dim() == 1 and k_pos.shape == q_pos.shape and k_pos.dtype == q_pos.dtype
    same = same and torch.equal(q_pos, k_pos)
    if same and bool((q_pos[1:] > q_pos[:-1]).all()):  # strictly increasing
        return None, True
    if bool(k_pos.max() <= q_pos.min()):
        return None, False
    return causal_mask(q_pos, k_pos), False  # [(b, 1,) q, k]


def alibi_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slopes: list[float],
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    causal: bool = True,
    scale: float | None = None,
    blocks: list[int] | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """ALiBi attention ``softmax(q kᵀ · scale - m_h (i - j)) v`` inside fused SDPA.

    Dropping the row constant ``-m_h · i`` (softmax is invariant to it) leaves ``m_h · j``:
    rank one in the key position, so it rides in the kernel as one more coordinate, ``q' =
    [q, m_h / scale]`` and ``k' = [k, j - centre]`` with ``scale`` unchanged; ``v`` is
    zero-padded to the same width (else the CPU kernel takes a slow path). Under a causal
    mask this is also the symmetric form ``-m_h |i - j|``.

    Precision: the kernel rounds each score to float32 at the size of ``m_h (j - centre)``,
    which for one centre grows with the length (2^-24 · m · L/2: ~1e-4 at L = 8192). So the
    queries are cut into blocks of at most ``2 · ALIBI_BLOCK_BIAS / m_h`` positions, each
    with its own centre and coordinate: a query puts ``m_h / scale`` in its block's
    coordinate and exact zeros in the others, so one extra product per score is non-zero
    and near keys stay within ``ALIBI_BLOCK_BIAS`` of zero (error ~4e-6 at any length). Far
    keys round worse but, under a causal mask, weigh ``exp(-m_h |i - j|)``, which makes that
    vanish (without a mask the fused path is as exact as the float32 math path). Heads share
    the widest block count of their run, at most two SDPA calls (:func:`alibi_runs`).

    float16/bfloat16 inputs are computed in float32 and rounded once (the CPU kernel runs
    bfloat16 no faster than float32, and integer positions past 256 are not exact in
    bfloat16). Fewer than ``ALIBI_SMALL_Q`` queries (decoding) take SDPA with the
    materialised float32 bias instead, cheaper than padded copies of the cache.

    Denormals: far keys' ``exp()`` lands in the float32 denormal range. Flushing them is
    safe (a probability below ~1e-38 changes no float32 sum of weights that includes the
    row maximum, 1), but not done: ``torch.set_flush_denormal`` reaches only the calling
    thread, not the kernel's worker threads, and measured no faster on the CPU we tried.

    Args:
        q: ``[batch, heads, q_len, d]``; k, v: ``[batch, kv_heads, k_len, d]``.
        slopes: ``heads`` slopes (0: no bias on that head).
        q_positions, k_positions: ``[len]`` or ``[batch, len]``, integer or floating.
        causal: mask keys after their query (``k_pos > q_pos``).
        scale: the score scale, default ``1/sqrt(d)``; the bias is not scaled.
        blocks: per-head block counts, default :func:`alibi_blocks` over the query span.
        mask: ``[batch | 1, 1, q_len, k_len]`` bool (True = may attend), combined with the
            causal mask: padding and packed documents.

    Shapes:
        returns ``[batch, heads, q_len, d]`` in the dtype of ``q``.
    """
    heads, kv_heads, d = q.shape[1], k.shape[1], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = heads // kv_heads
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qpos, kpos = q_positions.to(torch.float64), k_positions.to(torch.float64)
    if q.shape[2] < ALIBI_SMALL_Q:
        return _biased_sdpa(q, k, v, slopes, qpos, kpos, causal, scale, work, mask)
    low, high = qpos.min().item(), qpos.max().item()
    if blocks is None:
        blocks = alibi_blocks(slopes, high - low + 1)
    if work == torch.float64:  # 2^-53 rounding: one centre is exact enough at any length
        blocks = [min(n, 1) for n in blocks]
    attn_mask, is_causal = _mask(q_positions, k_positions) if causal else (None, False)
    if mask is not None:
        if is_causal:
            attn_mask, is_causal = causal_mask(q_positions, k_positions), False
        attn_mask = mask if attn_mask is None else attn_mask & mask
    outs, order = [], []
    for kv_idx, n in alibi_runs(blocks, group, d):
        kv = torch.tensor(kv_idx, device=q.device)
        q_idx = (kv.unsqueeze(1) * group + torch.arange(group, device=q.device)).flatten()
        if kv_idx == list(range(kv_idx[0], kv_idx[-1] + 1)):  # a slice: no gather
            first, last = kv_idx[0], kv_idx[-1] + 1
            q_run = q[:, first * group : last * group]  # [b, h_run, q_len, d]
            k_run, v_run = k[:, first:last], v[:, first:last]  # [b, g_run, k_len, d]
        else:
            q_run, k_run, v_run = (
                q.index_select(1, q_idx),
                k.index_select(1, kv),
                v.index_select(1, kv),
            )
        q_run, k_run, v_run = q_run.to(work), k_run.to(work), v_run.to(work)
        if n:
            run_slopes = torch.tensor([slopes[i] for i in q_idx.tolist()], dtype=torch.float64)
            run_slopes = run_slopes.to(q.device) / scale
            q_run, k_run, v_run = _extend(q_run, k_run, v_run, run_slopes, qpos, kpos, low, high, n)
        out = F.scaled_dot_product_attention(
            q_run,
            k_run,
            v_run,
            attn_mask=attn_mask,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=group > 1,
        )
        outs.append(out[..., :d])
        order.append(q_idx)
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    order = torch.cat(order)
    if not torch.equal(order, torch.arange(heads, device=q.device)):
        out = out.index_select(1, order.argsort())  # back to head order
    return out.to(q.dtype)


def _biased_sdpa(q, k, v, slopes, qpos, kpos, causal, scale, work, mask=None):
    """Few queries: SDPA with the materialised bias, ``[(b,) heads, q_len, k_len]`` in
    ``work`` dtype (a 4-D float mask: the CPU kernel takes bfloat16 q, k, v with it), and
    ``mask`` (bool, True = may attend) if given."""
    m = torch.tensor(slopes, dtype=torch.float64, device=q.device).view(-1, 1, 1)
    distance = qpos.unsqueeze(-1) - kpos.unsqueeze(-2)  # [(b,) q_len, k_len]
    if distance.dim() == 3:
        distance = distance.unsqueeze(1)  # [b, 1, q_len, k_len]
    bias = (-m * distance).to(work)  # [(b,) heads, q_len, k_len]
    if causal:
        bias = bias.masked_fill(distance < 0, float("-inf"))
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))  # [b, heads, q_len, k_len]
    if bias.dim() == 3:
        bias = bias.unsqueeze(0)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )


def _extend(q, k, v, slopes, qpos, kpos, low, high, n):
    """q, k, v with ``n`` centring coordinates appended (v with zeros).

    Query blocks are ``length`` positions long from ``low``; block ``b`` is centred at
    ``low + b · length + (length - 1) // 2`` (an integer for integer positions).
    """
    length = max(1, math.ceil((high - low + 1) / n))
    block = ((qpos - low) / length).floor().clamp(0, n - 1).long()  # [(bq,) q_len]
    centres = low + torch.arange(n, device=qpos.device, dtype=torch.float64) * length
    centres = centres + (length - 1) // 2  # [n]
    one_hot = F.one_hot(block, n).to(torch.float64)  # [(bq,) q_len, n]
    if one_hot.dim() == 2:
        one_hot = one_hot.unsqueeze(0)
    q_extra = one_hot.unsqueeze(1) * slopes.view(1, -1, 1, 1)  # [bq, h_run, q_len, n]
    k_extra = kpos.unsqueeze(-1) - centres  # [(bk,) k_len, n]
    if k_extra.dim() == 2:
        k_extra = k_extra.unsqueeze(0)
    b, g = k.shape[0], k.shape[1]
    q_extra = q_extra.to(q.dtype).expand(b, -1, -1, -1)
    k_extra = k_extra.unsqueeze(1).to(k.dtype).expand(b, g, -1, -1)  # [b, g_run, k_len, n]
    q2 = torch.cat((q, q_extra), dim=-1)  # [b, h_run, q_len, d + n]
    k2 = torch.cat((k, k_extra), dim=-1)  # [b, g_run, k_len, d + n]
    v2 = torch.cat((v, v.new_zeros(()).expand(b, g, v.shape[2], n)), dim=-1)  # [b, g, k, d + n]
    return q2, k2, v2
