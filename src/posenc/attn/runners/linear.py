"""The ``linear`` runner: biases linear in the distance (ALiBi's ``-m_h (i - j)``) fused
into CPU SDPA.

A bias encoding whose :meth:`~posenc.base.LinearSlopes.linear_slopes` returns slopes for
these inputs runs inside ``torch.nn.functional.scaled_dot_product_attention``'s fused CPU
kernels, with no ``[heads, L, L]`` tensor. :func:`~posenc.attn.planner.plan_bias` decides
where it applies, from :func:`linear_bias_blocks` and :func:`linear_bias_runs`;
:func:`linear_bias_sdpa` runs it. The derivation, the precision argument and the
measurements: docs/design-notes.md, "Fused ALiBi on CPU SDPA".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ...functional.dtypes import math_dtype
from ...positions import causal_mask
from ..masks import zero_dead_rows

if TYPE_CHECKING:
    from ...base import BiasEncoding
    from ..call import Call
    from ..planner import Plan

__all__ = [
    "BLOCK_BIAS",
    "MAX_WIDTH_RATIO",
    "SMALL_Q",
    "SPLIT_GAIN",
    "last_query_bias",
    "linear",
    "linear_bias_blocks",
    "linear_bias_runs",
    "linear_bias_sdpa",
]

#: the largest |bias| the fused path lets a query see at its centring point (see
#: :func:`linear_bias_sdpa`): float32 rounds the fused scores to ~2^-24 · 64 ≈ 4e-6
BLOCK_BIAS = 64.0
#: below this many queries :func:`linear_bias_sdpa` adds the materialised bias instead
#: (decoding: a ``[heads, q_len, k_len]`` bias is smaller than the padded copies of k and v)
SMALL_Q = 32
#: :func:`linear_bias_runs` makes two SDPA calls only when that cuts the total width by this
#: factor
SPLIT_GAIN = 1.1
#: the fused path is used while its padded heads cost at most this many times the plain
#: ones (extra centring coordinates, see :func:`linear_bias_sdpa`)
MAX_WIDTH_RATIO = 1.5


def linear_bias_blocks(slopes: list[float], span: float, max_bias: float = BLOCK_BIAS) -> list[int]:
    """How many query blocks :func:`linear_bias_sdpa` centres each head on: the fewest blocks of
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


def linear_bias_runs(blocks: list[int], group: int, head_dim: int) -> list[tuple[list[int], int]]:
    """How :func:`linear_bias_sdpa` splits the heads into SDPA calls: at most two runs of
    key/value heads, split where the total padded width is least.

    The CPU kernel's cost steps with the head width in multiples of 8 (65 to 72 cost the
    same, ~1.1x of 64), so each run's width is rounded up to one and the spare columns
    become more blocks, for free precision. The kernel splits each call's work evenly by
    (head, query block) across its threads, so a call over few heads leaves threads idle
    (causal blocks differ in cost): two calls only when they save a tenth of the total
    width, never one call per block count.

    Args:
        blocks: per query head, from :func:`linear_bias_blocks`.
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
    if width(split) * SPLIT_GAIN > width(len(needs)):
        split = len(needs)  # one call unless two save a tenth of the padding work
    runs = [(sorted(order[:split]), needs[0])]
    if split < len(needs):
        runs.append((sorted(order[split:]), needs[split]))
    return runs


def _mask(
    q_pos: torch.Tensor, k_pos: torch.Tensor, order: tuple[bool, bool] | None = None
) -> tuple[torch.Tensor | None, bool]:
    """The causal mask as ``(attn_mask, is_causal)`` for SDPA, with the cheapest form: the
    kernel's own causal mask when queries and keys are the same increasing positions, none
    when every key is at or before every query (decoding), else a boolean mask. ``order``:
    those two facts if known (:class:`~posenc.positions.record.AttnPositions`), else read
    here."""
    if order is None:
        same = q_pos.dim() == 1 and k_pos.shape == q_pos.shape and k_pos.dtype == q_pos.dtype
        same = same and torch.equal(q_pos, k_pos)
        increasing = same and bool((q_pos[1:] > q_pos[:-1]).all())
        order = increasing, bool(k_pos.max() <= q_pos.min())
    ordered, keys_first = order
    if ordered and q_pos.dim() == 1:
        return None, True
    if keys_first:
        return None, False
    return causal_mask(q_pos, k_pos), False  # [(b, 1,) q, k]


def linear_bias_sdpa(
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
    q_range: tuple[float, float] | None = None,
    order: tuple[bool, bool] | None = None,
    kept: Callable[[Callable[[], torch.Tensor]], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention with a bias linear in the distance, ``softmax(q kᵀ · scale - m_h (i - j))
    v``, inside fused SDPA: ALiBi (Press et al. 2022, arXiv:2108.12409) on the CPU kernels.

    Softmax drops the row constant ``-m_h · i``; what is left, ``m_h · j``, is rank one and
    rides in the kernel as extra coordinates ``q' = [q, m_h / scale]``, ``k' = [k, j -
    centre]`` (``v`` zero-padded), one centre per block of queries so float32 stays within
    ~4e-6 of exact at any length. Under a causal mask this is also the symmetric form
    ``-m_h |i - j|``. float16/bfloat16 run in float32 and are rounded once; fewer than
    ``SMALL_Q`` queries (decoding) take SDPA with the materialised bias instead.
    The derivation and the precision argument: docs/design-notes.md, "Fused ALiBi on CPU SDPA".

    Args:
        q: ``[batch, heads, q_len, d]``; k, v: ``[batch, kv_heads, k_len, d]``.
        slopes: ``heads`` slopes (0: no bias on that head).
        q_positions, k_positions: ``[len]`` or ``[batch, len]``, integer or floating.
        causal: mask keys after their query (``k_pos > q_pos``).
        scale: the score scale, default ``1/sqrt(d)``; the bias is not scaled.
        blocks: per-head block counts, default :func:`linear_bias_blocks` over the query
            span.
        mask: ``[batch | 1, 1, q_len, k_len]`` bool (True = may attend), combined with the
            causal mask: padding and packed documents.
        q_range: ``(min, max)`` of ``q_positions`` if known (a model reads it once per
            forward); default: read here.
        order: whether the positions are the same increasing ones for queries and keys,
            and whether every key is at or before every query, if known; default: read
            here.
        kept: ``kept(make)`` -> the materialised bias of fewer than ``SMALL_Q`` queries,
            ``make()`` or the one kept from a call with the same positions, slopes, mask
            and dtype (a model's layers: :meth:`AttentionContext.derived`); None: made.

    Shapes:
        returns ``[batch, heads, q_len, d]`` in the dtype of ``q``.
    """
    heads, kv_heads, d = q.shape[1], k.shape[1], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = heads // kv_heads
    work = math_dtype(q.dtype)
    if q.shape[2] < SMALL_Q:

        def make() -> torch.Tensor:
            return _small_bias(slopes, q_positions, k_positions, causal, work, mask)

        bias = make() if kept is None else kept(make)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
    qpos, kpos = q_positions.to(torch.float64), k_positions.to(torch.float64)
    low, high = (qpos.min().item(), qpos.max().item()) if q_range is None else q_range
    if blocks is None:
        blocks = linear_bias_blocks(slopes, high - low + 1)
    if work == torch.float64:  # 2^-53 rounding: one centre is exact enough at any length
        blocks = [min(n, 1) for n in blocks]
    attn_mask, is_causal = _mask(q_positions, k_positions, order) if causal else (None, False)
    if mask is not None:
        if is_causal:
            attn_mask, is_causal = causal_mask(q_positions, k_positions), False
        attn_mask = mask if attn_mask is None else attn_mask & mask
    outs, orders = [], []
    for kv_idx, n in linear_bias_runs(blocks, group, d):
        kv = torch.tensor(kv_idx, device=q.device)
        heads_run = [i * group + g for i in kv_idx for g in range(group)]
        q_idx = torch.tensor(heads_run, device=q.device)
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
            run_slopes = torch.tensor([slopes[i] for i in heads_run], dtype=torch.float64)
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
        orders += heads_run
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    if orders != list(range(heads)):  # the head of each output channel block
        back = torch.tensor(orders, device=q.device).argsort()
        out = out.index_select(1, back)  # back to head order
    return out.to(q.dtype)


def _small_bias(slopes, q_positions, k_positions, causal, work, mask=None):
    """Few queries: the materialised bias, ``[(b,) heads, q_len, k_len]`` in ``work`` dtype
    (a 4-D float mask: the CPU kernel takes bfloat16 q, k, v with it), ``-inf`` where
    ``causal`` hides a key or ``mask`` (bool, True = may attend) does."""
    qpos, kpos = q_positions.to(torch.float64), k_positions.to(torch.float64)
    m = torch.tensor(slopes, dtype=torch.float64, device=qpos.device).view(-1, 1, 1)
    distance = qpos.unsqueeze(-1) - kpos.unsqueeze(-2)  # [(b,) q_len, k_len]
    if distance.dim() == 3:
        distance = distance.unsqueeze(1)  # [b, 1, q_len, k_len]
    bias = (-m * distance).to(work)  # [(b,) heads, q_len, k_len]
    if causal:
        bias = bias.masked_fill(distance < 0, float("-inf"))
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))  # [b, heads, q_len, k_len]
    return bias.unsqueeze(0) if bias.dim() == 3 else bias


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


def linear(call: Call, plan: Plan) -> torch.Tensor:
    """The runner: :func:`linear_bias_sdpa` with the plan's slopes and blocks; padding,
    segments and the window or chunk reach it as the dense mask, which holds the causal
    part."""
    assert plan.slopes is not None, "the plan gives 'linear' its slopes"
    context, causal, pattern, dtype = call.context, call.causal, call.options.pattern, call.q.dtype
    mask = dead = None
    if context.masks is not None or pattern.local:
        allowed = context.allowed(causal, pattern)
        assert allowed is not None, "masks or a window: something is masked"
        mask, dead = allowed
    p = context.positions
    row = None
    if mask is None and not p.explicit and call.q.shape[2] == 1:  # a decode step's query
        assert call.encoding is not None, "the plan gives 'linear' to biases with slopes"
        k_len, work = call.k.shape[2], math_dtype(dtype)
        row = partial(last_query_bias, call.encoding, plan.slopes, k_len, work, call.q.device)
    key = ("linear", tuple(plan.slopes), causal, pattern, dtype)
    out = linear_bias_sdpa(
        call.q,
        call.k,
        call.v,
        plan.slopes,
        p.q,
        p.k,
        causal and mask is None,
        call.scale,
        plan.blocks,
        mask,
        q_range=p.q_range(),  # read with the positions' other facts
        order=(p.index_ordered(), p.keys_first()),
        kept=lambda make: context.derived(key, make if row is None else row),
    )
    return zero_dead_rows(out, dead)


def last_query_bias(
    encoding: BiasEncoding,
    slopes: list[float],
    k_len: int,
    work: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """The bias of one query after ``k_len`` keys at the default positions (a decode step:
    query ``k_len - 1``, keys ``0 .. k_len - 1``), ``-m_h (k_len - 1 - j)``: the last
    ``k_len`` columns of a table of a power-of-two length that the encoding keeps while it
    is unchanged (:meth:`~posenc.base.BiasEncoding.derived`), so a decode step slices it
    where it built the bias anew in a dozen kernels. The same float64 products as
    :func:`_small_bias`'s, rounded once to ``work``: equal to its bias to the bit.

    Shapes:
        -> ``[1, heads, 1, k_len]`` in ``work``.
    """
    size = 1 << (k_len - 1).bit_length()  # k_len >= 1: the query's own key at least

    def make() -> torch.Tensor:  # [heads, size]: column t at distance size - 1 - t
        m = torch.tensor(slopes, dtype=torch.float64, device=device).view(-1, 1)
        far = torch.arange(size - 1, -1, -1, dtype=torch.float64, device=device)
        return (-m * far).to(work)

    table = encoding.derived(("last_query_bias", tuple(slopes), size, device, work), make)
    return table[None, :, None, size - k_len :]
