"""KVCache: what it stores, what it returns, and the sizes it refuses."""

import pytest
import torch

import posenc
from posenc.attn import KVCache


def test_kv_cache_stores_and_refuses_overflow():
    cache = posenc.KVCache(n_layers=2, batch=1, kv_heads=2, head_dim=4, max_seq_len=5)
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    k_all, v_all = cache.update(1, k, v)
    assert torch.equal(k_all, k) and torch.equal(v_all, v)
    cache.advance(3)
    k2 = torch.randn(1, 2, 2, 4)
    k_all, _ = cache.update(1, k2, k2)
    assert torch.equal(k_all, torch.cat((k, k2), dim=2))
    cache.advance(2)
    with pytest.raises(ValueError, match="max_seq_len=5"):
        cache.update(0, k2[:, :, :1], k2[:, :, :1])


def test_layers_are_independent_and_length_advances_once_per_step():
    cache = KVCache(n_layers=3, batch=2, kv_heads=1, head_dim=4, max_seq_len=6)
    assert cache.keys.shape == (3, 2, 1, 6, 4) and cache.positions.shape == (2, 6)
    steps = [(torch.randn(2, 1, n, 4), torch.randn(2, 1, n, 4)) for n in (3, 1, 2)]
    for layer in range(3):
        assert cache.length == 0
        k, v = steps[0]
        k_all, v_all = cache.update(layer, k * (layer + 1), v * (layer + 1))
        assert k_all.shape == v_all.shape == (2, 1, 3, 4)
    cache.advance(3)
    for k, v in steps[1:]:
        for layer in range(3):
            k_all, _ = cache.update(layer, k * (layer + 1), v * (layer + 1))
            assert k_all.shape[2] == cache.length + k.shape[2]
        cache.advance(k.shape[2])
    assert cache.length == 6
    for layer in range(3):
        expected_k = torch.cat([k for k, _ in steps], dim=2) * (layer + 1)
        expected_v = torch.cat([v for _, v in steps], dim=2) * (layer + 1)
        assert torch.equal(cache.keys[layer], expected_k)
        assert torch.equal(cache.values[layer], expected_v)


def test_positions_are_stored_per_sequence():
    cache = KVCache(n_layers=1, batch=2, kv_heads=1, head_dim=2, max_seq_len=5)
    first = cache.update_positions(torch.arange(3))  # [n]: shared by the batch
    assert first.tolist() == [[0, 1, 2], [0, 1, 2]]
    cache.advance(3)
    second = cache.update_positions(torch.tensor([[7], [3]]))  # [batch, n]
    assert second.tolist() == [[0, 1, 2, 7], [0, 1, 2, 3]]
    assert second.dtype == torch.long
    with pytest.raises(TypeError, match="integer positions"):
        cache.update_positions(torch.tensor([1.5]))
    with pytest.raises(ValueError, match="3 are used and 3 more do not fit"):
        cache.update_positions(torch.arange(3))


def test_dtype_device_and_batch_check():
    cache = KVCache(1, 2, 1, 4, 8, device="cpu", dtype=torch.bfloat16)
    assert cache.keys.dtype == cache.values.dtype == torch.bfloat16
    assert cache.positions.dtype == torch.long and not cache.explicit_positions
    cache.check_batch(2)
    with pytest.raises(ValueError, match="cache holds 2 sequences but input_ids has 3"):
        cache.check_batch(3)


def test_cached_attention_equals_full_attention(attention_tol):
    """Queries decoded one step at a time over the cache see what the full causal pass
    gives them: the default layout puts the queries after the cached keys."""
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    full = posenc.attention(q, k, v)
    cache = KVCache(n_layers=1, batch=1, kv_heads=2, head_dim=8, max_seq_len=5)
    outs = []
    for i in range(5):
        k_all, v_all = cache.update(0, k[:, :, i : i + 1], v[:, :, i : i + 1])
        cache.advance(1)
        outs.append(posenc.attention(q[:, :, i : i + 1], k_all, v_all))
    rounding = attention_tol(q, k, v, causal=True)  # two kernels: rounding apart
    torch.testing.assert_close(torch.cat(outs, dim=2), full, **rounding)
