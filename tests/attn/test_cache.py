"""KVCache: what it stores, what it returns, the sizes it refuses, and the rolling
buffers of window and chunk layers."""

import pytest
import torch
from tests.attn.cache_state import assert_unchanged, state
from torch.testing import assert_close

import posenc
from posenc.attn import KVCache, StaticKVCache


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
    assert len(cache.keys) == 3 and cache.positions.shape == (2, 6)
    assert all(k.shape == (2, 1, 6, 4) for k in cache.keys + cache.values)
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


def test_positions_so_far_are_one_buffer_written_past_the_cached_ones():
    """Each step writes its new positions only (O(n) a step, not a copy of every cached
    one): what update_positions returns is a view of one buffer, and a refused or
    unadvanced step leaves the cache's positions as they were."""
    cache = KVCache(n_layers=1, batch=1, kv_heads=1, head_dim=2, max_seq_len=6)
    first = cache.update_positions(torch.tensor([4, 5]))
    cache.advance(2)
    unadvanced = cache.update_positions(torch.tensor([9]))  # never advanced
    # slot 2 keeps what it held: the default count's 2, not the unadvanced 9
    assert unadvanced.tolist() == [[4, 5, 9]] and cache.positions.tolist()[0][2] == 2
    second = cache.update_positions(torch.tensor([6]))  # replaces it
    assert second.tolist() == [[4, 5, 6]] and second.data_ptr() == first.data_ptr()
    cache.advance(1)
    assert cache.positions.tolist() == [[4, 5, 6, 3, 4, 5]]  # past length: the count
    cache.shift_positions(10)  # moves the cached positions: the next call copies them
    assert cache.update_positions(torch.tensor([17])).tolist() == [[14, 15, 16, 17]]


def test_the_count_is_in_place_and_nothing_is_written_for_it():
    """A cache that holds only the default count has it in its positions already:
    count_positions returns them as a view and advance writes none; once explicit
    positions are cached the count is refused (the next ones continue from the last)."""
    cache = KVCache(n_layers=1, batch=2, kv_heads=1, head_dim=2, max_seq_len=6)
    before = cache.positions.clone()
    seen = cache.count_positions(3)
    assert seen.tolist() == [[0, 1, 2]] * 2 and seen.data_ptr() == cache.positions.data_ptr()
    cache.advance(3)
    assert torch.equal(cache.positions, before) and cache.length == 3
    assert not cache.explicit_positions
    assert cache.count_positions(2).tolist() == [[0, 1, 2, 3, 4]] * 2
    cache.advance(2)
    with pytest.raises(ValueError, match="5 are used and 2 more do not fit"):
        cache.count_positions(2)
    cache.update_positions(torch.tensor([9]), explicit=True)
    cache.advance(1)
    assert cache.positions.tolist() == [[0, 1, 2, 3, 4, 9]] * 2
    with pytest.raises(ValueError, match="holds explicit positions"):
        cache.count_positions(1)
    with pytest.raises(ValueError, match="n must be"):
        KVCache(1, 1, 1, 2, 4).count_positions(-1)


def test_a_static_cache_counts_by_its_slots():
    made = [StaticKVCache(1, 2, 1, 2, 6) for _ in range(2)]
    for n in (3, 2):
        counted = made[0].count_positions(n)
        given = made[1].update_positions(made[1].slots(n))
        assert torch.equal(counted, given)
        for cache in made:
            cache.advance(n)
    assert torch.equal(made[0].positions, made[1].positions)


def test_dtype_device_and_batch_check():
    cache = KVCache(1, 2, 1, 4, 8, device="cpu", dtype=torch.bfloat16)
    assert cache.keys[0].dtype == cache.values[0].dtype == torch.bfloat16
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


@pytest.mark.parametrize("steps", [(1,) * 9, (4, 1, 3, 1), (9,), (2, 7)])
def test_a_rolling_layer_returns_the_last_keys_of_a_full_layer(steps):
    """A layer that keeps 3 keys returns, at every step, the last ``3 + n`` keys and values
    of a layer that keeps all, whatever the step sizes (prefill longer than the buffer,
    then single tokens), and holds 3 slots only."""
    cache = KVCache(n_layers=2, batch=2, kv_heads=1, head_dim=4, max_seq_len=9, keep=[None, 3])
    assert cache.rolling and [k.shape[2] for k in cache.keys] == [9, 3]
    for n in steps:
        k, v = torch.randn(2, 1, n, 4), torch.randn(2, 1, n, 4)
        full_k, full_v = cache.update(0, k, v)
        rolled_k, rolled_v = cache.update(1, k, v)
        seen = cache.visible(1, n)
        assert seen == min(cache.length, 3) + n == rolled_k.shape[2]
        assert torch.equal(rolled_k, full_k[:, :, -seen:])
        assert torch.equal(rolled_v, full_v[:, :, -seen:])
        assert cache.visible(0, n) == full_k.shape[2]
        cache.advance(n)
    key_bytes = 2 * 1 * 4 * 4  # batch x kv_heads x head_dim x float32
    assert cache.memory() == [2 * 9 * key_bytes, 2 * 3 * key_bytes]


def test_a_keep_larger_than_the_cache_keeps_everything_and_bad_keeps_raise():
    cache = KVCache(2, 1, 1, 4, max_seq_len=5, keep=[5, 9])
    assert cache.keep == [None, None] and not cache.rolling
    with pytest.raises(ValueError, match="one entry per layer"):
        KVCache(2, 1, 1, 4, 5, keep=[None])
    with pytest.raises(TypeError, match=r"keep\[1\] must be an int"):
        KVCache(2, 1, 1, 4, 5, keep=[None, 1.5])


def test_a_rolling_cache_refuses_positions_that_do_not_grow_within_a_document():
    """Keeping the last ``W - 1`` keys is exact only when a window of positions holds at
    most that many tokens; pads and a new document may restart the count."""
    cache = KVCache(1, 1, 1, 4, max_seq_len=8, keep=[2])
    cache.update_positions(torch.tensor([0, 1, 2]))
    cache.advance(3)
    with pytest.raises(ValueError, match="grow by at least one per token"):
        cache.update_positions(torch.tensor([2]))
    real = torch.tensor([[False, False, True, True, True]])
    padded = KVCache(1, 1, 1, 4, max_seq_len=8, keep=[2])
    padded.update_positions(torch.tensor([[0, 0, 0, 1, 2]]), real=real)  # left pads
    docs = torch.tensor([[0, 0, 1, 1, 1]])
    packed = KVCache(1, 1, 1, 4, max_seq_len=8, keep=[2])
    packed.update_positions(torch.tensor([[0, 1, 0, 1, 2]]), segments=docs)
    with pytest.raises(ValueError, match="grow by at least one"):
        packed2 = KVCache(1, 1, 1, 4, max_seq_len=8, keep=[2])
        packed2.update_positions(torch.tensor([[0, 1, 0, 1, 2]]))


@pytest.mark.parametrize("name", [None, "alibi", "fire", "t5"])
@pytest.mark.parametrize("pattern", [{"window": 4}, {"chunk": 4}])
def test_attention_over_the_last_keys_equals_the_window_over_all_keys(name, pattern):
    """The context of a rolling layer (:meth:`AttentionContext.last_keys`) keeps the keys'
    true positions, so position-dependent biases (FIRE reads the query's position) and the
    padding mask give what the window or chunk gives over every key."""
    from posenc.attn import AttentionContext

    torch.manual_seed(0)
    enc = None if name is None else posenc.create(name, n_heads=2)
    q, k, v = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 11, 8), torch.randn(2, 2, 11, 8)
    kpm = torch.ones(2, 11, dtype=torch.bool)
    kpm[1, :2] = False  # a left-padded row
    ctx = AttentionContext.build(3, 11, 2, torch.device("cpu"), key_padding_mask=kpm)
    with torch.no_grad():
        full = posenc.attention(q, k, v, enc, context=ctx, backend="math", **pattern)
        last = ctx.last_keys(3 + 3)  # keep = W - 1 = 3 past keys, and 3 new ones
        assert last.positions.k.tolist() == list(range(5, 11)) and last.positions.explicit
        cut = posenc.attention(
            q, k[:, :, -6:], v[:, :, -6:], enc, context=last, backend="math", **pattern
        )
    torch.testing.assert_close(cut, full, rtol=0, atol=1e-6)  # the same sums, fewer zeros
    assert ctx.last_keys(11) is ctx
    with pytest.raises(ValueError, match="q_len <= n < k_len"):
        ctx.last_keys(2)


def filled_cache() -> KVCache:
    """Two layers (all keys; the last 2), two sequences, three tokens at 0, 1, 2."""
    cache = KVCache(2, 2, 1, 4, max_seq_len=8, keep=[None, 2])
    cache.update_positions(torch.arange(3))
    for layer in range(2):
        cache.update(layer, torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4))
    cache.advance(3)
    return cache


K = torch.zeros(2, 1, 1, 4)
BAD_UPDATES = {
    "int64 k": (lambda c: c.update(0, K.long(), K), TypeError, "k must be torch.float32"),
    "bool k": (lambda c: c.update(0, K.bool(), K), TypeError, "k must be torch.float32"),
    "complex k": (lambda c: c.update(0, K.to(torch.complex64), K), TypeError, "k must be"),
    "float64 v": (lambda c: c.update(1, K, K.double()), TypeError, "v must be torch.float32"),
    "list k": (lambda c: c.update(0, K.tolist(), K), TypeError, "k must be a torch.Tensor"),
    "meta k": (lambda c: c.update(0, K.to("meta"), K), ValueError, "k is on meta but the cache"),
    "meta v": (lambda c: c.update(0, K, K.to("meta")), ValueError, "v is on meta but the cache"),
    "too many": (
        lambda c: c.update(0, torch.zeros(2, 1, 6, 4), torch.zeros(2, 1, 6, 4)),
        ValueError,
        "max_seq_len=8 positions; 3 are used and 6 more do not fit",
    ),
    "negative positions": (
        lambda c: c.update_positions(torch.tensor([-3])),
        ValueError,
        "positions must be >= 0, got -3",
    ),
    "positions of another batch": (
        lambda c: c.update_positions(torch.tensor([[4], [5], [6]])),
        ValueError,
        "positions has batch size 3 but the cache holds 2",
    ),
    "positions as a list": (
        lambda c: c.update_positions([3]),
        TypeError,
        "positions must be a torch.Tensor, got list",
    ),
    "bool positions": (
        lambda c: c.update_positions(torch.tensor([True])),
        TypeError,
        "positions must be an integer",
    ),
    "meta positions": (
        lambda c: c.update_positions(torch.tensor([3], device="meta")),
        ValueError,
        "positions is on meta",
    ),
    "positions that do not grow": (
        lambda c: c.update_positions(torch.tensor([2])),
        ValueError,
        "grow by at least one",
    ),
    "real as a list": (
        lambda c: c.update_positions(torch.tensor([3]), real=[[True] * 4] * 2),
        TypeError,
        "real must be a torch.Tensor, got list",
    ),
    "real of the new tokens only": (
        lambda c: c.update_positions(torch.tensor([3]), real=torch.ones(2, 1, dtype=torch.bool)),
        ValueError,
        r"real must be \[batch, length\] = \[2, 4\]",
    ),
    "complex real": (
        lambda c: c.update_positions(torch.tensor([3]), real=torch.ones(2, 4, dtype=torch.cfloat)),
        TypeError,
        "real must be a bool or integer",
    ),
    "float segments": (
        lambda c: c.update_positions(torch.tensor([3]), segments=torch.zeros(2, 4)),
        TypeError,
        "segments must be an integer tensor",
    ),
    "meta segments": (
        lambda c: c.update_positions(
            torch.tensor([3]), segments=torch.zeros(2, 4, dtype=torch.long, device="meta")
        ),
        ValueError,
        "segments must be .* on cpu, got shape .* on meta",
    ),
    "advance of another count": (
        lambda c: (c.update_positions(torch.tensor([3, 4])), c.advance(1)),
        ValueError,
        "n=1 tokens advanced, but update_positions was given 2",
    ),
}


@pytest.mark.parametrize("case", BAD_UPDATES)
def test_bad_updates_are_named_and_leave_the_cache_as_it_was(case):
    """Keys, values and positions of the wrong dtype (nothing is cast), device, batch or
    count, and positions below 0 or that a rolling layer cannot take: each a named error,
    and the cache's every tensor, count and flag as they were."""
    call, error, match = BAD_UPDATES[case]
    cache = filled_cache()
    before = state(cache)
    with pytest.raises(error, match=match):
        call(cache)
    assert_unchanged(before, cache)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"keep": 3}, TypeError, r"keep must be a list or tuple of one entry per layer \(n_l"),
        ({"keep": "ab"}, TypeError, "keep must be a list or tuple"),
        ({"key_dims": 8}, TypeError, "key_dims must be a list or tuple of one entry per layer"),
        ({"key_dims": [8, None]}, TypeError, r"key_dims\[1\] must be an int"),
        ({"key_dims": [8, 0]}, ValueError, r"key_dims\[1\] must be >= 1"),
        ({"keep": [None, -1]}, ValueError, r"keep\[1\] must be >= 0"),
    ],
)
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_per_layer_sizes_are_lists_and_named(kwargs, error, match, static):
    """``keep`` and ``key_dims`` take one entry per layer (an int, or None for keep: every
    key); an int for all of them is not guessed."""
    with pytest.raises(error, match=match):
        (posenc.StaticKVCache if static else KVCache)(2, 1, 1, 4, 8, **kwargs)


def test_a_refused_step_leaves_a_rolling_cache_as_it_was(model_tol):
    """A step whose position does not grow is refused by a rolling cache (a window of 3);
    the cache is then exactly as before, not flagged as holding explicit positions, and the
    next step without positions gives recomputation's logits."""
    from posenc.models import LayerPlan, LayerSpec, TransformerLM

    torch.manual_seed(0)
    plan = LayerPlan([LayerSpec("rope", window=3), LayerSpec("rope")])
    model = TransformerLM(50, 32, 2, 4, plan=plan).eval()
    ids = torch.randint(0, 50, (1, 5))
    cache = model.new_cache(1, 8)
    with torch.no_grad():
        full = model(ids)
        model(ids[:, :4], cache=cache)
        before = state(cache)
        with pytest.raises(ValueError, match="grow by at least one"):
            model(ids[:, 4:], torch.tensor([1]), cache=cache)
        assert_unchanged(before, cache)
        assert not cache.explicit_positions
        step = model(ids[:, 4:], cache=cache)
    assert_close(step, full[:, 4:], **model_tol(model, 5, full))


@pytest.mark.parametrize("static", [False, True])
def test_a_second_update_of_a_layer_in_one_step_is_refused_and_changes_nothing(static):
    """Before advance, a second update of one layer would overwrite the first's keys: it is
    refused by name, the cache as it was; advance, or a new step (update_positions: a
    forward that failed half way runs again), lets the layer be written again."""
    make = posenc.StaticKVCache if static else KVCache
    cache = make(n_layers=2, batch=1, kv_heads=1, head_dim=4, max_seq_len=8)
    k = torch.randn(1, 1, 2, 4)
    cache.update_positions(torch.arange(2)[None])
    cache.update(0, k, k)
    before = state(cache)
    with pytest.raises(ValueError, match="layer 0 was updated twice in one step"):
        cache.update(0, k, k)
    assert_unchanged(before, cache)
    cache.update(1, k, k)  # another layer: its first write
    cache.update_positions(torch.arange(2)[None])  # the step again, from its start
    cache.update(0, k, k)
    cache.update(1, k, k)
    cache.advance(2)
    cache.update_positions(torch.tensor([[2]]))
    cache.update(0, k[:, :, :1], k[:, :, :1])  # the next step
    assert (int(cache.filled) if static else cache.length) == 2


def test_keys_and_values_side_by_side_are_one_copy_into_one_buffer():
    """A layer that keeps every key, as wide as its values, holds both in one buffer (keys
    and values are views of it): update_joint in a model's layers writes it in one copy and
    returns what update of the halves returns; a layer that rolls, or whose keys were
    replaced since, or a caller outside a model, takes update (and its checks)."""
    from posenc.host_reads import checked

    cache = KVCache(3, 2, 2, 4, max_seq_len=8, keep=[None, 3, None], key_dims=[4, 4, 8])
    assert sorted(cache.joint) == [0]  # layer 1 rolls, layer 2's keys are twice as wide
    assert cache.keys[0]._base is cache.joint[0] and cache.values[0]._base is cache.joint[0]
    other = KVCache(3, 2, 2, 4, max_seq_len=8, keep=[None, 3, None], key_dims=[4, 4, 8])
    kv = torch.randn(2, 4, 3, 4)
    with checked():
        k, v = cache.update_joint(0, kv)
    want_k, want_v = other.update(0, kv[:, :2], kv[:, 2:])
    assert torch.equal(k, want_k) and torch.equal(v, want_v) and k.shape == (2, 2, 3, 4)
    assert torch.equal(cache.joint[0][:, :, :3], kv)
    with pytest.raises(TypeError, match=r"kv must be torch\.float32"):  # outside: checked
        cache.update_joint(2, kv.double())
    cache.keys[0] = cache.keys[0].clone()  # replaced: the buffer is no longer what it reads
    cache.advance(3)
    with checked():
        k, _ = cache.update_joint(0, torch.ones(2, 4, 1, 4))
    assert torch.equal(k[:, :, 3], torch.ones(2, 2, 4))  # written where the keys are now
    assert torch.equal(cache.joint[0][:, :2, 3], torch.zeros(2, 2, 4))


def test_a_static_cache_keeps_every_buffer_its_own():
    from posenc.attn import StaticKVCache

    cache = StaticKVCache(2, 1, 2, 4, max_seq_len=8)
    assert cache.joint == {} and all(k.is_contiguous() for k in cache.keys + cache.values)
