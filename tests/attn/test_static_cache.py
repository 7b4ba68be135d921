"""StaticKVCache: decoding over fixed shapes gives what recomputation gives, for every
encoding of token sequences, with padding and a layer plan; and it refuses what it cannot
hold."""

from __future__ import annotations

import inspect

import pytest
import torch
from tests.attn.cache_state import assert_unchanged, state
from torch.testing import assert_close

import posenc
from posenc import StaticKVCache
from posenc.models import LayerPlan, LayerSpec, TransformerLM

NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
VOCAB = 50


def decode(model, ids, cache, prompt, **kwargs):
    """Logits of ``ids`` as a prompt of ``prompt`` tokens, then one token per step."""
    steps = [model(ids[:, :prompt], cache=cache, **kwargs)]
    steps += [model(ids[:, i : i + 1], cache=cache, **kwargs) for i in range(prompt, ids.shape[1])]
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("name", NAMES)
def test_static_decoding_equals_recomputation(name, model_tol):
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, 32, 2, 4, encoding=name).eval()
    ids = torch.randint(0, VOCAB, (2, 11))
    with torch.no_grad():
        full = model(ids)
        got = decode(model, ids, model.new_cache(2, 16, static=True), 6)
    assert_close(got, full, **model_tol(model, 11, full))


def test_static_decoding_with_padding_and_a_plan(model_tol):
    torch.manual_seed(0)
    plan = LayerPlan([LayerSpec("rope", window=3, sinks=True), LayerSpec("alibi", chunk=4)])
    model = TransformerLM(VOCAB, 32, 2, 4, plan=plan).eval()
    ids = torch.randint(0, VOCAB, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[0, :3] = 0
    full_mask = torch.cat([mask, mask.new_ones(2, 4)], dim=1)  # every slot of the cache
    cache = model.new_cache(2, 14, static=True)
    # the window of 3 keeps a ring of its last 2 keys, the chunk of 4 of its last 3
    assert [k.shape[2] for k in cache.keys] == [2, 3]
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        got = decode(model, ids, cache, 5, attention_mask=full_mask)
    real = mask.bool()
    assert_close(got[real], full[real], **model_tol(model, 10, full))


def test_static_cache_shapes_never_change_and_slots_fill_in_place():
    cache = StaticKVCache(1, 1, 1, 4, max_seq_len=6)
    k0 = cache.keys[0]
    k, _ = cache.update(0, torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4))
    cache.advance(2)
    k2, _ = cache.update(0, torch.full((1, 1, 1, 4), 2.0), torch.ones(1, 1, 1, 4))
    assert k.data_ptr() == k2.data_ptr() == k0.data_ptr() and k2.shape == (1, 1, 6, 4)
    assert k2[0, 0, :, 0].tolist() == [1, 1, 2, 0, 0, 0]
    assert cache.written(1).tolist() == [True, True, True, False, False, False]


def test_every_tensor_a_step_writes_is_marked_as_a_static_address():
    """What lets a CUDA graph replay a step's in-place writes (``torch.compile`` with
    ``mode="reduce-overhead"``): every tensor of the cache, made at its creation or with a
    clock, is marked static (unguarded: another cache re-records, never recompiles)."""
    cache = StaticKVCache(3, 1, 2, 4, max_seq_len=8, keep=[None, 3, 5])
    cache.add_clock(1, heads=2)
    held = cache.tensors()
    assert len(held) == 3 + 3 + 2 + 2 + 2 * 2  # keys, values, clock, last, count, rings
    assert {id(t) for t in held} >= {id(cache.positions), id(cache.filled)}
    assert all(t._dynamo_static_input_type == "unguarded" for t in held)


def test_static_cache_refuses_what_it_cannot_hold():
    model = TransformerLM(VOCAB, 16, 1, 2, encoding="rope")
    cache = model.new_cache(1, 4, static=True)
    with pytest.raises(ValueError, match="max_seq_len=4 positions; 0 are used and 5 more"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="segment_ids are not supported with a StaticKVCache"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=cache, segment_ids=torch.zeros(1, 4))
    with pytest.raises(
        ValueError, match=r"attention_mask must be \[batch, past \+ seq\] = \[1, 4\]"
    ):
        model(
            torch.zeros(1, 2, dtype=torch.long),
            cache=cache,
            attention_mask=torch.ones(1, 2, dtype=torch.long),
        )
    with pytest.raises(TypeError, match="static must be a bool"):
        model.new_cache(1, 4, static="yes")


def test_a_ring_holds_the_last_tokens_in_their_slots():
    """Token ``t`` in slot ``t % n``; a call sees the ring as it was, then its new keys."""
    cache = StaticKVCache(1, 1, 1, 1, max_seq_len=10, keep=[3])
    seen, _ = cache.update(0, torch.arange(5.0).view(1, 1, 5, 1), torch.zeros(1, 1, 5, 1))
    cache.advance(5)
    assert seen[0, 0, :, 0].tolist() == [0, 0, 0, 0, 1, 2, 3, 4]  # empty ring, 5 new
    assert cache.keys[0][0, 0, :, 0].tolist() == [3, 4, 2]  # tokens 2, 3, 4 in slots 2, 0, 1
    seen, _ = cache.update(0, torch.full((1, 1, 1, 1), 5.0), torch.zeros(1, 1, 1, 1))
    assert seen[0, 0, :, 0].tolist() == [3, 4, 2, 5] and cache.visible(0, 1) == 4
    positions, real = cache.ring_keys(torch.tensor([[5]]), torch.tensor([[True]]))[3]
    assert positions.tolist() == [[0, 0, 0, 5]]  # the ring's positions, then the new one
    assert real.tolist() == [[False, False, False, True]]  # no position was written before


def filled_static() -> StaticKVCache:
    """Two layers (all keys; a ring of 2), one sequence, three tokens at 0, 1, 2."""
    cache = StaticKVCache(2, 1, 1, 4, max_seq_len=4, keep=[None, 2])
    cache.update_positions(torch.arange(3))
    cache.ring_keys(torch.arange(3).view(1, 3), torch.ones(1, 3, dtype=torch.bool))
    for layer in range(2):
        cache.update(layer, torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4))
    cache.advance(3)
    return cache


K = torch.zeros(1, 1, 1, 4)


@pytest.mark.parametrize("validate", [True, False], ids=["validated", "unvalidated"])
@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.update(0, K.long(), K), TypeError, "k must be torch.float32"),
        (lambda c: c.update(0, K.bool(), K), TypeError, "k must be torch.float32"),
        (lambda c: c.update(0, K.to(torch.complex64), K), TypeError, "k must be torch.float32"),
        (lambda c: c.update(1, K, K.half()), TypeError, "v must be torch.float32"),
        (
            lambda c: c.update(0, torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4)),
            ValueError,
            "max_seq_len=4 positions; 3 are used and 2 more do not fit",
        ),
        (
            lambda c: c.update(0, torch.zeros(1, 1, 5, 4), torch.zeros(1, 1, 5, 4)),
            ValueError,
            "max_seq_len=4 positions; 3 are used and 5 more do not fit",
        ),
        (
            lambda c: c.update_positions(torch.tensor([3, 4])),
            ValueError,
            "3 are used and 2 more do not fit",
        ),
        (lambda c: c.advance(2), ValueError, "3 are used and 2 more do not fit"),
        (
            lambda c: c.update_positions(torch.tensor([3]), real=[[True] * 4]),
            TypeError,
            "real must be a torch.Tensor",
        ),
        (
            lambda c: c.update_positions(
                torch.tensor([3]), real=torch.ones(1, 1, dtype=torch.bool)
            ),
            ValueError,
            r"real must be \[batch, length\] = \[1, 4\]",
        ),
    ],
    ids=[
        "int64",
        "bool",
        "complex",
        "float16",
        "past",
        "wider",
        "positions",
        "advance",
        "real list",
        "real of the new tokens",
    ],
)
def test_bad_updates_are_named_and_leave_the_cache_as_it_was(call, error, match, validate):
    """Keys of another dtype are refused (nothing is cast); keys past ``max_seq_len`` are
    refused from the shapes (the count of tokens the host wrote: no read), so with
    validation off too. The cache is then exactly as it was."""
    cache = filled_static()
    before = state(cache)
    with posenc.validation(validate), pytest.raises(error, match=match):
        call(cache)
    assert_unchanged(before, cache)


def test_static_cache_takes_the_arguments_of_kv_cache_by_name():
    """Its signature is KVCache's, spelled out (``*args, **kwargs`` hid every parameter
    from help() and from the contract's probes)."""
    assert inspect.signature(StaticKVCache) == inspect.signature(posenc.KVCache)


def test_past_max_seq_len_is_read_where_the_host_lost_count():
    """Once a compiled call or a DecodeStep advanced the cache, the count is in ``filled``
    alone: the forward's read refuses what does not fit."""
    cache = filled_static()
    cache.host_filled = None
    before = state(cache)
    with pytest.raises(ValueError, match="3 are used and 2 more do not fit"):
        cache.update(0, torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    wider = "max_seq_len=4 positions; 5 new tokens do not fit"  # a shape fact still
    with posenc.validation(False), pytest.raises(ValueError, match=wider):
        cache.update(0, torch.zeros(1, 1, 5, 4), torch.zeros(1, 1, 5, 4))
    assert_unchanged(before, cache)


@pytest.mark.parametrize("static", [False, True], ids=["rolling", "static"])
def test_a_window_refuses_positions_that_do_not_grow_and_the_cache_stays(static, model_tol):
    """A window of 3, positions 0..3, then a step at position 1: refused by a static
    cache's ring as by a rolling cache (a window over positions would see keys its ring
    dropped). The cache is as it was, and a step without positions then sits at 4."""
    torch.manual_seed(0)
    plan = LayerPlan([LayerSpec("rope", window=3), LayerSpec("rope")])
    model = TransformerLM(VOCAB, 32, 2, 4, plan=plan).eval()
    ids = torch.randint(0, VOCAB, (1, 5))
    cache = model.new_cache(1, 8, static=static)
    with torch.no_grad():
        full = model(ids)
        model(ids[:, :4], torch.arange(4), cache=cache)
        before = state(cache)
        with pytest.raises(ValueError, match="grow by at least one"):
            model(ids[:, 4:], torch.tensor([1]), cache=cache)
        assert_unchanged(before, cache)
        step = model(ids[:, 4:], cache=cache)
    assert_close(step, full[:, 4:], **model_tol(model, 5, full))


def test_refused_forwards_leave_a_static_cache_as_it_was():
    """Every refusal of a forward (its checks read once, after the positions are
    computed): the cache's tensors, count and flags are as they were."""
    torch.manual_seed(0)
    learned = {"name": "learned", "max_positions": 20}
    plan = LayerPlan([LayerSpec("rope", window=3), LayerSpec("fox")], input=learned)
    model = TransformerLM(VOCAB, 16, 2, 2, plan=plan).eval()
    cache = model.new_cache(1, 8, static=True)
    ids = torch.randint(0, VOCAB, (1, 8))
    with torch.no_grad():
        model(ids[:, :4], torch.arange(10, 14), cache=cache)
    before = state(cache)
    mask = torch.ones(1, 8, dtype=torch.long)
    for call, error, match in (
        (lambda: model(ids[:, :5], cache=cache), ValueError, "4 are used and 5 more"),
        (lambda: model(ids[:, :1], torch.tensor([-1]), cache=cache), ValueError, ">= 0"),
        (lambda: model(ids[:, :1], torch.tensor([30]), cache=cache), ValueError, "max_pos"),
        (lambda: model(ids[:, :1], cache=cache, attention_mask=mask), ValueError, "pass pos"),
        (lambda: model(ids[:, :1], torch.tensor([12]), cache=cache), ValueError, "grow by"),
        (lambda: model(ids[:, :2].expand(2, 2), cache=cache), ValueError, "input_ids has 2"),
    ):
        with torch.no_grad(), pytest.raises(error, match=match):
            call()
        assert_unchanged(before, cache)


@pytest.mark.parametrize("validate", [True, False], ids=["validated", "unvalidated"])
def test_a_triton_model_past_a_full_cache_is_refused_from_the_shapes(validate):
    """RoPE with ``kernel="triton"`` writes its keys in the fused kernel
    (:meth:`StaticKVCache.update_rotated`): a step past a full cache is refused before it,
    with validation off too, and nothing is written."""
    pytest.importorskip("triton")
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, 16, 1, 2, encoding={"name": "rope", "kernel": "triton"}).eval()
    cache = model.new_cache(1, 4, static=True)
    ids = torch.randint(0, VOCAB, (1, 5))
    with torch.no_grad(), posenc.validation(validate):
        model(ids[:, :4], cache=cache)
        before = state(cache)
        with pytest.raises(ValueError, match="max_seq_len=4 positions; 4 are used and 1 more"):
            model(ids[:, 4:], cache=cache)
        with pytest.raises(ValueError, match="max_seq_len=4 positions; 0 are used and 5 more"):
            model(ids, cache=model.new_cache(1, 4, static=True))
    assert_unchanged(before, cache)
