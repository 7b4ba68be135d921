"""A TransformerLM layer's PaTH transforms (posenc.models.transforms): cached beside their
keys, and handed to attention in the order of the sequence with a static cache (its empty
slots after the new tokens, a ring layer's slots rotated): decoding equals recomputation
with every kind of cache, with padding and a windowed layer; the order and the context
gathered with it."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import StaticKVCache
from posenc.attn import AttentionContext
from posenc.models import LayerPlan, LayerSpec, TransformerLM
from posenc.models.transforms import in_sequence_order, static_order

VOCAB = 37


def decode(model, ids, cache, prompt, **kwargs):
    """Logits of ``ids`` as a prompt of ``prompt`` tokens, then one token per step."""
    steps = [model(ids[:, :prompt], cache=cache, **kwargs)]
    steps += [model(ids[:, i : i + 1], cache=cache, **kwargs) for i in range(prompt, ids.shape[1])]
    return torch.cat(steps, dim=1)


def path_model(sharpen, kv_heads=2):
    plan = LayerPlan([LayerSpec({"name": "path"}, window=3), LayerSpec("path")])
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, 32, 2, 4, n_kv_heads=kv_heads, plan=plan)
    return sharpen(model).eval()


@pytest.mark.parametrize("kind", ["dynamic", "rolling", "static", "static-rolling"])
def test_decoding_equals_recomputation_with_every_cache(kind, sharpen, model_tol):
    """A prompt of 5 (more than one token: a static cache's later prompt tokens lie between
    a query and its keys unless the slots are reordered), then one token per step, past the
    window's ring of 2 keys."""
    model = path_model(sharpen)
    ids = torch.randint(0, VOCAB, (2, 11))
    static, rolling = kind.startswith("static"), kind.endswith("rolling")
    cache = model.new_cache(2, 14, static=static, rolling=rolling)
    with torch.no_grad():
        full = model(ids)
        got = decode(model, ids, cache, 5)
    assert_close(got, full, **model_tol(model, 11, full))


def test_static_decoding_with_padding(sharpen, model_tol):
    """Left padding: a pad's transform is the identity, cached or not."""
    model = path_model(sharpen)
    ids = torch.randint(0, VOCAB, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0
    full_mask = torch.cat([mask, mask.new_ones(2, 3)], dim=1)  # every slot of the cache
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        got = decode(model, ids, model.new_cache(2, 12, static=True), 4, attention_mask=full_mask)
    real = mask.bool()
    assert_close(got[real], full[real], **model_tol(model, 9, full))


def test_static_order_puts_the_new_tokens_last():
    cache = StaticKVCache(2, 1, 1, 4, max_seq_len=8, keep=[None, 3])
    cache.filled.fill_(5)  # tokens 0 .. 4 held; 2 new ones go to slots 5, 6; slot 7 empty
    assert static_order(cache, 0, 8, 2).tolist() == [7, 0, 1, 2, 3, 4, 5, 6]
    # the ring of 3 holds tokens 2, 3, 4 in slots 2, 0, 1; then the 2 new tokens
    assert static_order(cache, 1, 5, 2).tolist() == [2, 0, 1, 3, 4]
    cache.filled.fill_(1)  # ring slots 1, 2 empty, token 0 in slot 0
    assert static_order(cache, 1, 4, 1).tolist() == [1, 2, 0, 3]


def test_in_sequence_order_gathers_the_keys_positions_and_masks():
    real = torch.tensor([[True, False, True, True]])
    segments = torch.tensor([[0, 0, 1, 1]])
    context = AttentionContext.build(
        2,
        4,
        1,
        torch.device("cpu"),
        q_positions=torch.tensor([[2, 3]]),
        k_positions=torch.tensor([[0, 1, 2, 3]]),
        key_padding_mask=real,
        segment_ids=(segments[:, 2:], segments),
    )
    order = torch.tensor([3, 0, 1, 2])
    got = in_sequence_order(context, order)
    assert torch.equal(got.positions.k, torch.tensor([[3, 0, 1, 2]]))
    assert torch.equal(got.positions.q, context.positions.q)
    assert got.masks is not None
    assert torch.equal(got.masks.key_padding_mask, real[:, order])
    assert torch.equal(got.masks.k_segments, segments[:, order])
    dense, _ = got.allowed(True)
    want, _ = context.allowed(True)
    assert torch.equal(dense, want[..., order])
