"""Scaled dot-product attention with a positional encoding plugged in.

:func:`attention` is the one place where rotary and bias encodings meet attention: it
checks its inputs and dispatches by the encoding's kind. Rotary encodings rotate q and k,
bias encodings add their term to the scores, additive encodings belong at the input and
are refused here, and ``none`` adds nothing. The call is then one :class:`~posenc.attn.call.Call`,
which :func:`~posenc.attn.planner.plan` gives to one of the runners
(:data:`~posenc.attn.runners.RUNNERS`: fused SDPA, flex attention, the explicit softmax
and the CPU kernels of bias encodings).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import cast

import torch

from ..base import BiasEncoding, Encoding, ReadsInput, RotaryEncoding
from ..config import check_bool
from ..host_reads import batched, read
from ..rotary.dca import DualChunkRoPE
from .call import Call, ScoreOptions
from .checks import (
    check_call,
    check_context,
    check_encoding,
    check_qkv,
    check_scale,
    check_softcap,
    finite_sums,
)
from .dispatch import run, run_within
from .dual_chunk import dual_chunk_attention
from .masks import AttentionContext, AttnPattern

__all__ = ["attend", "attention"]


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: Encoding | None = None,
    *,
    q_positions: torch.Tensor | None = None,
    k_positions: torch.Tensor | None = None,
    causal: bool = True,
    scale: float | None = None,
    backend: str = "auto",
    key_padding_mask: torch.Tensor | None = None,
    segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    bias: torch.Tensor | None = None,
    context: AttentionContext | None = None,
    window: int | None = None,
    chunk: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
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
        scale: the score scale, default ``1/sqrt(head_dim)`` of q as given (before a rotary
            encoding that widens it: PoPE). A bias is added after scaling (ALiBi's bias is
            not divided by ``sqrt(head_dim)``).
        backend: ``"auto"`` (the fastest exact one,
            :func:`~posenc.attn.planner.plan`), ``"flex"`` (flex
            attention: no ``[heads, L, L]`` tensor), ``"sdpa"`` (SDPA, with the
            materialised bias) or ``"math"`` (explicit softmax in float32).
        key_padding_mask: ``[batch, k_len]`` bool, True for a real token: keys at False
            are hidden from every query.
        segment_ids: ``[batch, seq]`` integer document ids of packed sequences: a query
            sees only keys of its own document. With a KV cache (``q_len != k_len``) pass
            ``(q_segment_ids, k_segment_ids)``, ``[batch, q_len]`` and ``[batch, k_len]``.
            Give each document positions of its own too
            (:func:`posenc.positions.from_segments`).
        bias: with a bias encoding, its table for these positions,
            ``encoding.bias(q_positions, k_positions)`` (``[heads, q_len, k_len]``, or
            ``[batch, heads, q_len, k_len]`` for ``[batch, len]`` positions), computed once
            and shared by the layers of a model, so that one backward through it reaches the
            encoding's parameters. The paths that materialise the bias use it (SDPA, math,
            the CPU training path); flex attention and the fused linear-bias path compute
            the same bias per score instead. Not for encodings whose bias depends on ``q``
            (``needs_q``: Shaw). None: computed here where needed. With an encoding whose
            bias is computed from the layer's input (an :class:`~posenc.base.InputBias`:
            FoX), required: its clock of the keys' tokens, ``encoding.clock(x)``, ``[batch,
            heads, k_len]``. With one whose scores pass through transforms of the layer's
            input (an :class:`~posenc.base.InputTransforms`: PaTH), required too: the
            transforms of the keys' tokens, ``encoding.transforms(x)``, ``[batch,
            kv_heads, k_len, head_dim]``.
        context: the positions and masks of this call built once for several
            (:meth:`AttentionContext.build <posenc.attn.masks.AttentionContext.build>`
            takes the four arguments above), as a model's layers share them; then none of
            ``q_positions``, ``k_positions``, ``key_padding_mask`` and ``segment_ids``.
            Not with a rotary encoding: rotate q and k first.
        window: a sliding window of ``W`` positions. Causal: a query at position ``i``
            sees the keys ``j`` with ``i - W < j <= i`` (Mistral 7B's and Gemma 2/3's local
            layers; gpt-oss's banded layers with ``W = 128``). Not causal:
            ``|i - j| <= W // 2`` (ModernBERT's local attention, ``W = 128``). Flex
            attention then skips the blocks outside it: ``O(L·W)``.
        chunk: a query sees only the keys of its own chunk of ``C`` positions,
            ``i // C == j // C`` (and ``j <= i`` when causal): Llama 4's chunked attention
            (``C = 8192``). Not with ``window``.
        sinks: ``[heads]`` learned logits, one per query head, that join every row's
            softmax and read no value (gpt-oss): a head may then attend to nothing. The
            rows' probabilities sum to ``1 - p_sink``.
        softcap: scores become ``softcap * tanh(s / softcap)`` after the scale and the
            bias, before the mask (Gemma 2: 50.0). Softcap runs on ``math``, or on ``flex``
            at inference; sinks on ``math``; ``backend="sdpa"`` refuses both.

    Positions decide the window and the chunk, as they decide the causal mask: explicit
    positions, packed documents and KV caches follow them. A query that may see no key at
    all (a pad query, say) gets zeros, never NaN, and no gradient.

    Non-finite values, on every backend: a NaN or infinity in a slot a query may not see (a
    future key, a pad's value, a later token's FoX gate) never reaches that query's output;
    one it does see does, as in plain attention: a NaN in its query, in a key or value it
    sees, or in its head's sink makes its row NaN. A score of ``+inf`` takes the row's
    weight (shared among such scores: the softmax's limit), one of ``-inf`` none. Calls
    whose q, k, v (or FoX clock) are not all finite run on the ``math`` backend, which
    keeps both halves of the rule.

    Returns:
        ``[batch, heads, q_len, head_dim]`` in the dtype of ``q``.
    """
    check_qkv(q, k, v)
    check_bool("causal", causal)
    kind = check_encoding(encoding)
    scale = check_scale(scale, q.shape[-1])  # of the input width (PoPE widens q and k)
    merged = kind == "rotary" and cast(RotaryEncoding, encoding).merges_attention
    reads_input = isinstance(encoding, ReadsInput)  # FoX's clock, PaTH's transforms
    if not merged:  # dca refuses what it cannot take by name (_merged)
        check_call(encoding, kind, q, k, bias, sinks, backend, reads_input)
    if merged:  # dca: q and k turned in its own attention, per region of keys
        refused = {"causal=False": not causal, "bias": bias is not None,
                   "window": window is not None, "chunk": chunk is not None,
                   "sinks": sinks is not None, "softcap": softcap is not None}  # fmt: skip
        q_positions, k_positions = _merged(encoding, backend, refused, q_positions, k_positions)
    elif kind == "rotary":
        if context is not None:
            raise ValueError("context is for encodings that do not rotate: rotate q and k first")
        q, k, q_positions, k_positions = _rotate(encoding, q, k, q_positions, k_positions)
    given = (q_positions, k_positions, key_padding_mask, segment_ids)
    # a FoX clock carries a token's NaN to later ones, a PaTH transform to the scores across it
    clock = bias if reads_input else None
    context, finite = _context(q, k, v, context, given, clock, merged)
    if merged:
        dca = cast(DualChunkRoPE, encoding)
        return dual_chunk_attention(q, k, v, dca, context, scale, explicit=backend == "math")
    options = ScoreOptions(AttnPattern(window, chunk), check_softcap(softcap), sinks)
    call = Call(
        q,
        k,
        v,
        cast(BiasEncoding, encoding) if kind == "bias" else None,
        context,
        causal,
        scale,
        backend,
        bias,
        options,
        finite,
    )
    return run(call)


def _context(q, k, v, context, given, clock, merged):
    """The call's context (built from the ``given`` positions and masks, the default one,
    or the caller's ``context`` checked) and whether q, k, v and FoX's ``clock`` are all
    finite (not asked of an encoding that runs its own attention: ``merged``), their
    value checks read together: one host read."""
    defaults = all(g is None for g in given)
    gather = context is None and not defaults
    sums: list[float] = []
    with batched() if gather else nullcontext():
        if context is None and defaults and type(q) is torch.Tensor:
            context = AttentionContext.default(q.shape[2], k.shape[2], q.shape[0], q.device)
        elif context is None:
            q_positions, k_positions, key_padding_mask, segment_ids = given
            context = AttentionContext.build(
                q.shape[2],
                k.shape[2],
                q.shape[0],
                q.device,
                q_positions=q_positions,
                k_positions=k_positions,
                key_padding_mask=key_padding_mask,
                segment_ids=segment_ids,
            )
        else:
            check_context(context, q, k, *given)
        values = None if merged else finite_sums(q, k, v, clock)
        if values is not None and gather:
            read(values, sums.extend)  # with the block's other reads, as it ends
        elif values is not None:
            sums = values.tolist()
    return context, all(map(math.isfinite, sums))


def _merged(encoding, backend, refused, q_positions, k_positions):
    """Refuse by name what an encoding that turns q and k in its own attention (``dca``:
    :func:`~posenc.attn.dual_chunk.dual_chunk_attention`) cannot take (``refused``: the
    arguments, by name, each True where given), and return its positions checked (None
    stays None)."""
    name = encoding.info.name
    given = [key for key, value in refused.items() if value]  # window=0 is given, too
    if given:
        raise ValueError(f"{name!r} runs its own causal attention, which takes no {given[0]}")
    if backend not in ("auto", "math"):
        raise ValueError(
            f"{name!r} runs its own attention: backend must be 'auto' (fused SDPA by chunks "
            f"where it can) or 'math' (the explicit softmax), got {backend!r}"
        )
    return tuple(
        None if p is None else encoding.check_positions(p, name=n)
        for p, n in ((q_positions, "q_positions"), (k_positions, "k_positions"))
    )


def _rotate(encoding, q, k, q_positions, k_positions):
    """q and k rotated by a rotary encoding, and the positions the mask orders them by:
    the encoding checks its own positions (grid coordinates, M-RoPE's ``[3, batch, seq]``)
    and fills in its defaults; positions with no token order give None (the mask then
    follows the index)."""
    rotary = cast(RotaryEncoding, encoding)
    q, k = rotary(q, k, positions=q_positions, k_positions=k_positions)
    if q_positions is None:
        return q, k, None, None
    k_positions = q_positions if k_positions is None else k_positions
    q_order, k_order = rotary.causal_positions(q_positions), rotary.causal_positions(k_positions)
    if q_order is None or k_order is None:
        return q, k, None, None
    return q, k, q_order, k_order


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding: BiasEncoding | None,
    context: AttentionContext,
    *,
    causal: bool,
    scale: float,
    options: ScoreOptions,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`attention` of inputs a model made and checked once per forward: a
    :class:`~posenc.models.TransformerLM` layer's q, k, v (turned already by a rotary
    encoding), its forward's ``context``, its own ``options`` and ``scale``, the bias table
    the forward made. Nothing is checked again and no value is read (inside the forward's
    :func:`~posenc.host_reads.checked` block the finiteness check of :func:`attention`
    reads nothing either: the layers zero non-finite keys and values instead); the call
    goes straight to the planner (:func:`~posenc.attn.dispatch.run_within`: the forward's
    ``checked`` and ``UNCHANGED`` blocks span its layers). An encoding that runs its own
    attention (``dca``) goes through :func:`attention`.

    Shapes:
        as :func:`attention`.
    """
    call = Call(q, k, v, encoding, context, causal, scale, "auto", bias, options, True)
    return run_within(call)
