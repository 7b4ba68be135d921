"""StaticKVCache: decoding over fixed shapes gives what recomputation gives, for every
encoding of token sequences, with padding and a layer plan; and it refuses what it cannot
hold."""

from __future__ import annotations

import pytest
import torch
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
