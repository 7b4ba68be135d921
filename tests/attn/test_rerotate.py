"""``cache.rerotate``: a cache's keys turned in place to shifted positions (or new
frequencies) equal the keys computed at those positions, in every kind of layer a cache
holds (all keys, a rolling window, a static cache's slots and rings), with the positions
shifted too; a model decoding on after the shift gives what recomputation gives."""

from __future__ import annotations

import pytest
import torch
from tests.attn.cache_state import assert_unchanged, state
from torch.testing import assert_close

import posenc
from posenc import KVCache, StaticKVCache
from posenc.models import LayerPlan, LayerSpec, TransformerLM


def fill(cache, rope, k, v, n):
    """Write ``n`` tokens of ``k`` rotated at 0..n-1 into every layer, a token at a time."""
    for t in range(n):
        pos = torch.tensor([t])
        k_t = rope.rotate(k[:, :, t : t + 1], rope.rotation(pos), key=True)
        cache.update_positions(pos.expand(k.shape[0], 1))
        for layer in range(len(cache.keys)):
            cache.update(layer, k_t, v[:, :, t : t + 1])
        cache.advance(1)


def test_shifted_keys_equal_keys_rotated_at_the_new_positions():
    rope = posenc.create("rope", head_dim=8)
    k, v = torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    cache = KVCache(2, 2, 2, 8, max_seq_len=10, keep=[None, 3])  # layer 1: a window of 4
    fill(cache, rope, k, v, 7)
    cache.rerotate(rope, delta=100)
    expected = rope.rotate(k, rope.rotation(torch.arange(7) + 100), key=True)
    keys, positions = cache.stored_keys(0)
    n = 7
    assert_close(keys[:, :, :n], expected, atol=1e-5, rtol=0)
    assert torch.equal(positions[:, :n], (torch.arange(7) + 100).expand(2, 7))
    ring, ring_positions = cache.stored_keys(1)  # the last 3 tokens, in ring or buffer order
    for slot in range(3):
        t = int(ring_positions[0, slot]) - 100
        assert_close(ring[:, :, slot], expected[:, :, t], atol=1e-5, rtol=0)
    assert cache.explicit_positions


@pytest.mark.parametrize("static", [False, True])
def test_a_model_decodes_on_after_a_shift(static, model_tol):
    """A prompt cached at positions 0..5, shifted by 20, then decoding at 26, 27, ...: the
    logits of recomputing everything at positions 20..., with a window layer (a rolling
    buffer, or a static cache's ring) and a full one."""
    torch.manual_seed(0)
    plan = LayerPlan([LayerSpec("rope", window=4), LayerSpec("rope")])
    model = TransformerLM(50, 32, 2, 4, plan=plan).eval()
    ids = torch.randint(0, 50, (1, 9))
    shifted = torch.arange(9) + 20
    cache = model.new_cache(1, 9, static=static)
    assert isinstance(cache, StaticKVCache) == static
    with torch.no_grad():
        full = model(ids, positions=shifted)
        model(ids[:, :6], cache=cache)
        cache.rerotate(model.encoding, delta=20)
        steps = [
            model(ids[:, i : i + 1], cache=cache, positions=shifted[i : i + 1]) for i in range(6, 9)
        ]
    got = torch.cat(steps, 1)
    assert_close(got, full[:, 6:], **model_tol(model, 9, full))


def test_bad_input_is_named():
    cache = KVCache(1, 1, 1, 8, max_seq_len=4)
    rope = posenc.create("rope", head_dim=8)
    with pytest.raises(TypeError, match="rope must be a RoPE encoding"):
        cache.rerotate(posenc.create("xpos", head_dim=8))
    with pytest.raises(ValueError, match="share their layout, rotary_dim and rotary_at"):
        cache.rerotate(rope, to=posenc.create("rope", head_dim=8, layout="interleaved"))
    with pytest.raises(ValueError, match="head_dim=16"):
        cache.rerotate(posenc.create("rope", head_dim=16))
    with pytest.raises(TypeError, match="delta must be an int or an integer tensor"):
        cache.rerotate(rope, delta=torch.tensor([1.5]))


LONGROPE = {
    "rope_type": "longrope",
    "factor": 4.0,
    "original_max_position_embeddings": 8,
    "short_factor": [1.0, 1.0, 1.5, 2.0],
    "long_factor": [1.0, 2.0, 4.0, 8.0],
}


def crossing(n_layers: int, rerotate: bool) -> float:
    """The largest logit error of decoding tokens 9..12 after a prompt of 8 (LongRoPE's
    short factors), against one forward of all 12 (its long factors)."""
    torch.manual_seed(0)
    encoding = {"name": "rope", "scaling": LONGROPE}
    model = TransformerLM(50, 32, n_layers, 4, encoding=encoding).eval()
    ids = torch.randint(0, 50, (1, 12))
    cache = model.new_cache(1, 12)
    with torch.no_grad():
        full = model(ids)
        model(ids[:, :8], cache=cache)
        if rerotate:
            cache.rerotate(model.encoding, seq_len=8, new_seq_len=12)
        steps = [model(ids[:, i : i + 1], cache=cache) for i in range(8, 12)]
    return (torch.cat(steps, 1) - full[:, 8:]).abs().max().item()


def test_crossing_longropes_boundary():
    """Past the original length LongRoPE switches to its long factors. Stale keys (rotated
    with the short ones) are wrong; re-rotated ones equal recomputation in a one-layer
    model. Deeper, the cached hidden states themselves came from attention with the
    short factors, which no rotation changes: closer, not equal (measured)."""
    stale, rotated = crossing(1, False), crossing(1, True)
    # logits of size about 5: equal up to float32 roundings (measured 5e-7); stale ones 0.07
    assert rotated < 1e-5 < 0.01 < stale
    assert crossing(2, True) < crossing(2, False) / 2


BAD = {
    "bool delta": ({"delta": torch.tensor([True])}, TypeError, "delta must be an int or an int"),
    "float delta": ({"delta": 1.5}, TypeError, "delta must be an int"),
    "huge delta": ({"delta": torch.tensor([2**62])}, ValueError, r"delta must lie within ±"),
    "delta below 0": ({"delta": -10}, ValueError, "moves a cached position to -10"),
    "delta of rows": ({"delta": torch.tensor([1, 2, 3])}, ValueError, r"\[batch=1\]"),
    "meta delta": ({"delta": torch.tensor(1, device="meta")}, ValueError, "delta is on meta"),
    "layers twice": ({"layers": [0, 0]}, ValueError, "layers must name each layer once"),
    "layers int": ({"layers": 0}, TypeError, "layers must be a list or tuple"),
    "layer past": ({"layers": [2]}, ValueError, r"layers\[0\] must be <= 1"),
    "negative seq_len": ({"seq_len": -1}, ValueError, "seq_len must be >= 1"),
    "float new_seq_len": ({"new_seq_len": 1.5}, TypeError, "new_seq_len must be an int"),
    "str seq_len": ({"seq_len": "a"}, TypeError, "seq_len must be an int"),
}


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("case", BAD)
def test_bad_arguments_are_named_and_leave_the_cache_as_it_was(case, static):
    """Each refused before anything turns: every key, position and flag as it was."""
    kwargs, error, match = BAD[case]
    rope = posenc.create("rope", head_dim=8)
    cache = (StaticKVCache if static else KVCache)(2, 1, 1, 8, max_seq_len=8, keep=[None, 2])
    k, v = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    fill(cache, rope, k, v, 5)  # positions 0..4
    before = state(cache)
    with pytest.raises(error, match=match):
        cache.rerotate(rope, **kwargs)
    assert_unchanged(before, cache)


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_a_shift_down_to_zero_is_taken_and_positions_continue_without_being_given(
    static, model_tol
):
    """A prompt cached at 10..15, shifted by -10 (its first token to 0: allowed), then
    steps without positions: they continue from the shifted ones (6, 7, 8), the logits of
    recomputing everything at 0..8."""
    torch.manual_seed(0)
    plan = LayerPlan([LayerSpec("rope", window=4), LayerSpec("rope")])
    model = TransformerLM(50, 32, 2, 4, plan=plan).eval()
    ids = torch.randint(0, 50, (1, 9))
    cache = model.new_cache(1, 9, static=static)
    with torch.no_grad():
        full = model(ids)
        model(ids[:, :6], torch.arange(10, 16), cache=cache)
        cache.rerotate(model.encoding, delta=-10)
        steps = [model(ids[:, i : i + 1], cache=cache) for i in range(6, 9)]
    assert_close(torch.cat(steps, 1), full[:, 6:], **model_tol(model, 9, full))
