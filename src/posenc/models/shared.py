"""What one forward of :class:`~posenc.models.TransformerLM` computes once and hands to
every layer: the positions, the attention context (positions and masks), and the bias
table where one pays.

:func:`forward_inputs` turns the forward's arguments into :class:`ForwardInputs`: the
positions the encoding takes, and the :class:`~posenc.attn.AttentionContext` every layer's
attention reads its mask from, so nothing is checked, defaulted or masked once per layer.
:func:`shared_bias` computes a bias encoding's table once, where the model shares one
(:func:`~posenc.attn.planner.shares_table`) and the backend runs on one
(:func:`~posenc.attn.planner.plan`): one backward through it reaches the
encoding's parameters (autograd sums every layer's gradient into it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch

from ..attn import AttentionContext, KVCache
from ..attn.planner import PLAIN_TRAITS, AttnShape, ScoreTraits, plan, shares_table
from ..attn.static_cache import StaticKVCache
from ..base import BiasEncoding, Encoding, ReadsInput, RotaryEncoding
from ..positions import arange, document_starts, from_padding, from_segments, query_offset
from .inputs import check_mask, check_masks

__all__ = [
    "ForwardInputs",
    "check_plan_positions",
    "continued_positions",
    "forward_inputs",
    "layer_contexts",
    "layer_tables",
    "rotations_of",
    "shared_bias",
]


@dataclass(frozen=True)
class ForwardInputs:
    """The positions and masks of one forward.

    Attributes:
        positions: what the encoding takes, checked: ``[seq]``, ``[batch, seq]`` or an
            encoding's own shape (M-RoPE's ``[3, batch, seq]``).
        explicit: whether the caller gave them (or the masks implied them).
        context: the attention context of every layer: the positions that order queries
            and keys (with the cached keys), and the padding and document masks.
        rings: with a :class:`~posenc.attn.StaticKVCache`, the context of the layers that
            keep a ring of ``n`` keys, by ``n`` (their keys: the ring, then the new ones).
    """

    positions: torch.Tensor
    explicit: bool
    context: AttentionContext
    rings: dict[int, AttentionContext]


def check_plan_positions(
    encodings: Sequence[Encoding],
    positions: torch.Tensor,
    *,
    seq_len: int | None = None,
    batch: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``positions`` checked by every encoding of a model (the first's result is kept:
    integer dtypes as int64), and their token order for the causal mask: the positions
    themselves, or None where a rotary encoding finds none (M-RoPE's ``[3, batch, seq]``).

    Shapes:
        positions: ``[seq]``, ``[batch, seq]`` or an encoding's own shape -> both the same.
    """
    first, *rest = encodings
    checked = first.check_positions(positions, seq_len=seq_len, batch=batch)
    for enc in rest:
        enc.check_positions(positions, seq_len=seq_len, batch=batch)
    order: torch.Tensor | None = checked
    for enc in encodings:
        if enc.kind == "rotary" and order is not None:
            order = cast(RotaryEncoding, enc).causal_positions(checked)
    return checked, order


def forward_inputs(
    encodings: Sequence[Encoding],
    input_ids: torch.Tensor,
    positions: torch.Tensor | None,
    cache: KVCache | None,
    attention_mask: torch.Tensor | None,
    segment_ids: torch.Tensor | None,
) -> ForwardInputs:
    """Check and default the arguments of :meth:`TransformerLM.forward
    <posenc.models.TransformerLM.forward>` (see there), storing the new tokens' positions in
    ``cache``.

    Without positions, a cache that holds explicit positions continues from its last
    one (:func:`continued_positions`); else padding and documents imply them (each
    document, each unpadded prompt, gets the positions it has alone); otherwise the new
    tokens follow the cached ones (:func:`~posenc.positions.query_offset`). The cache
    stores the new positions when the model advances it, after the forward's checks: a
    refused call leaves it as it was. Positions with no token order of their
    own (M-RoPE) rotate q and k only; the mask then follows the token index. Every one of
    the model's ``encodings`` checks the positions (:func:`check_plan_positions`).
    """
    if isinstance(cache, StaticKVCache):
        return _static_inputs(encodings, input_ids, positions, cache, attention_mask, segment_ids)
    b, s = input_ids.shape
    device = input_ids.device
    past = 0 if cache is None else cache.length
    if cache is not None:
        cache.check_batch(b)
    masks = check_masks(attention_mask, segment_ids, b, past + s, device)
    if positions is not None and segment_ids is not None:
        document_starts(segment_ids)  # reused ids would let a token see a later one
    given = positions is not None
    if positions is None and cache is not None:
        positions = continued_positions(cache, s, masks is not None)
    if positions is None and masks is not None:
        mask, ids = masks  # one at least is given: the mask when there are no ids
        full = from_padding(cast(torch.Tensor, mask)) if ids is None else from_segments(ids, mask)
        positions = full[:, past:]
    explicit = positions is not None
    order = None  # the positions' token order, for the causal mask and the cache
    if positions is not None:
        positions, order = check_plan_positions(encodings, positions, seq_len=s, batch=b)
    ordered = order is not None
    if order is None:
        offset = query_offset(s, past + s)
        order = arange(s, device=device, offset=offset)
        if not explicit:  # each encoding's limit, from the shapes: no value is read
            for enc in encodings:
                enc.default_positions(s, device, offset=offset)
    q_pos = k_pos = None  # None: attention's default, the fastest causal mask
    if cache is not None:
        real, ids = (None, None) if masks is None else masks  # for a rolling cache's check
        # the default count after default ones: >= 0 and growing, nothing to read
        if not explicit and not cache.explicit_positions:  # the count after the count
            k_positions = cache.count_positions(s)
        else:
            k_positions = cache.update_positions(
                order, real=real, segments=ids, explicit=ordered, given=given and ordered
            )
        if ordered or cache.explicit_positions:
            q_pos, k_pos = (order if order.dim() == 2 else order.expand(b, s)), k_positions
    elif ordered:
        q_pos = k_pos = order
    key_padding_mask = segments = None
    if masks is not None:
        key_padding_mask, ids = masks
        segments = None if ids is None else (ids[:, past:], ids)  # (queries, keys)
    context = AttentionContext.build(
        s,
        past + s,
        b,
        device,
        q_positions=q_pos,
        k_positions=k_pos,
        key_padding_mask=key_padding_mask,
        segment_ids=segments,
    )
    return ForwardInputs(order if positions is None else positions, explicit, context, {})


def _static_inputs(
    encodings: Sequence[Encoding],
    input_ids: torch.Tensor,
    positions: torch.Tensor | None,
    cache: StaticKVCache,
    attention_mask: torch.Tensor | None,
    segment_ids: torch.Tensor | None,
) -> ForwardInputs:
    """:func:`forward_inputs` with a :class:`~posenc.attn.StaticKVCache`: the keys are
    every slot of the cache, the unwritten ones hidden by a padding mask, and the new
    tokens' slots and default positions follow ``cache.filled`` (a tensor): no shape or
    Python value changes from one step to the next. ``attention_mask`` covers every slot,
    ``[batch, max_seq_len]`` (1 past the prompt); documents are refused. Without positions,
    a cache holding explicit ones continues from its last (:func:`continued_positions`)."""
    b, s = input_ids.shape
    size = cache.max_seq_len
    cache.check_batch(b)
    cache.check_room(s)
    if segment_ids is not None:
        raise ValueError("segment_ids are not supported with a StaticKVCache: use a KVCache")
    mask = None
    if attention_mask is not None:
        mask = check_mask("attention_mask", attention_mask, b, size, input_ids.device)
    slots = cache.slots(s)  # [s]
    given = positions is not None
    if positions is None:
        positions = continued_positions(cache, s, mask is not None)
    implied = positions is None and mask is not None
    if positions is None:
        positions = slots if mask is None else from_padding(mask).index_select(1, slots)
    positions, order = check_plan_positions(encodings, positions, seq_len=s, batch=b)
    ordered = order is not None and (given or implied or cache.explicit_positions)
    if order is None:  # M-RoPE's ids: the mask follows the slots
        order = slots
    order = order if order.dim() == 2 else order.expand(b, s)
    k_positions = cache.update_positions(
        order, real=mask, explicit=ordered, given=given and ordered
    )
    written = cache.written(s).expand(b, size)
    device = input_ids.device
    context = AttentionContext.build(
        s,
        size,
        b,
        device,
        q_positions=order,
        k_positions=k_positions,
        key_padding_mask=written if mask is None else written & mask,
    )
    real = (  # [b, s]: whether each new token is real
        torch.ones(b, s, dtype=torch.bool, device=device)
        if mask is None
        else mask.index_select(1, slots)
    )
    rings = {
        n: AttentionContext.build(
            s, n + s, b, device, q_positions=order, k_positions=seen, key_padding_mask=present
        )
        for n, (seen, present) in cache.ring_keys(order, real).items()
    }
    # explicit: each step's rotation follows its positions, not a length (a tensor here)
    return ForwardInputs(positions, True, context, rings)


def continued_positions(cache: KVCache, s: int, masked: bool) -> torch.Tensor | None:
    """The positions of ``s`` new tokens given none: where ``cache`` holds explicit
    positions, those after its last (``[batch, s]``, :meth:`~posenc.attn.KVCache.
    next_positions`), else None (the default count, or what the masks imply). With
    ``masked`` (a padding mask or documents), positions the caller gave are refused: the
    masks would imply positions that restart at 0."""
    if cache.given_positions and masked:
        raise ValueError(
            "the cache holds positions the caller gave (or shifted by rerotate): pass "
            "positions for the new tokens too; attention_mask and segment_ids alone imply "
            "positions counted from 0"
        )
    if cache.explicit_positions and not masked:
        return cache.next_positions(s)
    return None


def layer_contexts(
    inputs: ForwardInputs, cache: KVCache | None, n_layers: int, s: int
) -> list[AttentionContext]:
    """Each layer's attention context in one forward of ``s`` tokens: the forward's
    (every key; also with no cache, where a length export keeps it symbolic), a rolling
    cache's layer its last keys only (one context per number of keys), a
    :class:`~posenc.attn.StaticKVCache` ring's layer the ring before this call and the
    new keys."""
    if cache is None:
        return [inputs.context] * n_layers
    rings = cache.keep if isinstance(cache, StaticKVCache) else [None] * n_layers
    by_keys: dict[int, AttentionContext] = {}
    contexts = []
    for layer, ring in enumerate(rings):
        if ring is not None:
            contexts.append(inputs.rings[ring])
            continue
        seen = cache.visible(layer, s)
        if seen not in by_keys:
            by_keys[seen] = inputs.context.last_keys(seen)
        contexts.append(by_keys[seen])
    return contexts


def rotations_of(
    encodings: Sequence[Encoding], layers: Sequence[int], inputs: ForwardInputs
) -> dict[int, tuple[torch.Tensor, ...]]:
    """The rotary tables of one forward, once per rotary encoding that a layer uses, by its
    index in ``encodings`` (``layers``: each layer's index). One that turns its queries per
    region of keys (``merges_attention``: ``dca``) has none: attention turns q and k.
    Default positions (the queries after the cached keys) are rotated by the tables of
    :meth:`~posenc.base.RotaryEncoding.default_rotation` in the form the layers turn by
    (``_layer_rotation``): RoPE's widened rows of a table made once, no position tensor."""
    rotary = [
        (e, enc)
        for e, enc in enumerate(encodings)
        if isinstance(enc, RotaryEncoding) and not enc.merges_attention and e in layers
    ]
    if inputs.explicit:
        return {e: enc.rotation(inputs.positions) for e, enc in rotary}
    p = inputs.context.positions
    offset, device = p.k_len - p.q_len, inputs.positions.device
    # the current total length, offset + q_len, is k_len: default_rotation's own default
    return {e: enc._layer_rotation(p.q_len, device, offset) for e, enc in rotary}


def shared_bias(
    encoding: Encoding,
    context: AttentionContext,
    shape: AttnShape,
    *,
    causal: bool,
    training: bool,
    cached: bool,
    traits: ScoreTraits | None = None,
) -> torch.Tensor | None:
    """The bias table every layer's attention takes (``bias=`` of
    :func:`posenc.attention`), or None where :func:`~posenc.attn.planner.plan`
    runs the layers without one (``Plan.table`` None), or where a model does not share
    one (:func:`~posenc.attn.planner.shares_table`: training on the CPU without a cache).

    Args:
        encoding: the model's encoding.
        context: the forward's positions and masks.
        shape: the sizes of the layers' q and k.
        causal: whether the model is causal.
        training: whether this forward needs gradients.
        cached: whether a KV cache is in use.
        traits: the layers' window or chunk, soft cap and whether they have sinks (what
            :func:`~posenc.attn.planner.plan` reads of them).

    Returns:
        ``[heads, q_len, k_len]`` (``[batch, heads, q_len, k_len]`` for ``[batch, seq]``
        positions) or None.

    Example:
        >>> import posenc
        >>> fire, t5 = posenc.create("fire", n_heads=4), posenc.create("t5", n_heads=4)
        >>> ctx = AttentionContext.build(6, 6, 1, torch.device("cpu"))
        >>> shape = AttnShape(1, 4, 4, 6, 6, 8)
        >>> shared_bias(fire, ctx, shape, causal=True, training=True, cached=False).shape
        torch.Size([4, 6, 6])
        >>> shared_bias(fire, ctx, shape, causal=True, training=False, cached=False) is None
        True
        >>> shared_bias(t5, ctx, shape, causal=True, training=True, cached=False) is None
        True
    """
    traits = PLAIN_TRAITS if traits is None else traits  # not a default: dynamo 2.11
    if encoding.kind != "bias" or isinstance(encoding, ReadsInput):
        return None  # FoX's clock, PaTH's transforms read each layer's input: its layer's
    bias = cast(BiasEncoding, encoding)
    device = context.positions.q.device
    if not shares_table(bias, training=training, cached=cached, device=device):
        return None
    chosen = plan(
        bias,
        shape,
        context.positions,
        masked=context.masks is not None,
        causal=causal,
        needs_grad=training,
        device=device,
        traits=traits,
        table_given=True,  # what runs on a table the layers share
    )
    if chosen.table == "full":
        return bias.bias(context.positions.q, context.positions.k)
    return None  # computed per score or per block: no table


def layer_tables(
    encodings: Sequence[Encoding],
    layers: Sequence[int],
    traits: Sequence[ScoreTraits],
    context: AttentionContext,
    shape: AttnShape,
    *,
    causal: bool,
    training: bool,
    cached: bool,
) -> dict[tuple[int, ScoreTraits], torch.Tensor]:
    """The bias tables of one forward (:func:`shared_bias`), once per bias encoding and
    per :class:`~posenc.attn.call.ScoreTraits` of the layers that use it, by
    ``(encoding index, traits)``; layers whose runner needs no table get none.

    Args:
        encodings: the model's distinct encodings.
        layers: each layer's index in ``encodings``.
        traits: each layer's :attr:`~posenc.models.blocks.SelfAttention.score_traits`.
        context, shape, causal, training, cached: as :func:`shared_bias`.
    """
    tables: dict[tuple[int, ScoreTraits], torch.Tensor] = {}
    done = set()
    for key in zip(layers, traits, strict=True):
        e, layer_traits = key
        if encodings[e].kind != "bias" or key in done:
            continue
        done.add(key)
        table = shared_bias(
            encodings[e],
            context,
            shape,
            causal=causal,
            training=training,
            cached=cached,
            traits=layer_traits,
        )
        if table is not None:
            tables[key] = table
    return tables
