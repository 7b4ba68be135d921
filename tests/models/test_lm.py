"""TransformerLM: routing by kind, permutation (in)variance, KV-cache decoding."""

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.models import TransformerLM


def lm(encoding, causal=True, **kwargs):
    kwargs = {"vocab_size": 41, "dim": 32, "n_layers": 2, "n_heads": 4, **kwargs}
    return TransformerLM(encoding=encoding, causal=causal, **kwargs)


def test_bidirectional_nope_is_permutation_equivariant():
    """Attention alone cannot see order: shuffling tokens shuffles outputs identically."""
    model = lm("nope", causal=False).double()
    ids = torch.randint(0, 41, (2, 12))
    perm = torch.randperm(12)
    torch.testing.assert_close(model(ids[:, perm]), model(ids)[:, perm], atol=1e-6, rtol=0)


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "scaled_sinusoidal"])
def test_positional_encodings_break_permutation_equivariance(encoding):
    model = lm(encoding, causal=False).double()
    ids = torch.randint(0, 41, (2, 12))
    perm = torch.randperm(12)
    assert (model(ids[:, perm]) - model(ids)[:, perm]).abs().max() > 1e-3


def test_causal_mask_alone_breaks_permutation_equivariance():
    model = lm("nope").double()
    ids = torch.randint(0, 41, (2, 12))
    perm = torch.randperm(12)
    assert (model(ids[:, perm]) - model(ids)[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "nope"])
def test_cached_prefill_then_decode_equals_full_forward(encoding, model_tol):
    model = lm(encoding, n_kv_heads=2)
    ids = torch.randint(0, 41, (3, 10))
    full = model(ids)
    cache = model.new_cache(3, 10)
    parts = [model(ids[:, :6], cache=cache), model(ids[:, 6:9], cache=cache)]
    parts.append(model(ids[:, 9:], cache=cache))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, **model_tol(model, 10, full))


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned"])
def test_explicit_positions(encoding, model_tol):
    model = lm(encoding)
    ids = torch.randint(0, 41, (2, 7))
    default = model(ids)
    rounding = model_tol(model, 7, default)
    torch.testing.assert_close(model(ids, positions=torch.arange(7)), default, **rounding)
    # explicit positions are carried through the cache
    positions = torch.arange(3, 10).expand(2, 7)
    full = model(ids, positions=positions)
    cache = model.new_cache(2, 7)
    head = model(ids[:, :4], positions=positions[:, :4], cache=cache)
    tail = model(ids[:, 4:], positions=positions[:, 4:], cache=cache)
    torch.testing.assert_close(torch.cat((head, tail), 1), full, **rounding)


def test_generate_with_cache_equals_recomputation_and_sampling_is_seeded():
    model = lm("sinusoidal")
    ids = torch.randint(0, 41, (2, 5))
    greedy = model.generate(ids, 12)
    assert greedy.shape == (2, 17) and torch.equal(greedy[:, :5], ids)
    assert torch.equal(greedy, model.generate(ids, 12, use_cache=False))
    sampled = [
        model.generate(ids, 6, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(3))
        for _ in range(2)
    ]
    assert torch.equal(sampled[0], sampled[1])


def test_generate_past_a_learned_table_fails_clearly():
    model = lm({"name": "learned", "max_positions": 8})
    prompt = torch.randint(0, 41, (1, 5))
    assert model.generate(prompt, 4).shape == (1, 9)  # the last token is never read back
    with pytest.raises(posenc.PositionOutOfRangeError, match="max_positions=8"):
        model.generate(prompt, 5)


def test_encoding_given_by_name_dict_or_instance():
    assert lm("sinusoidal").encoding.config.dim == 32
    assert lm({"name": "learned", "max_positions": 64}).encoding.config.max_positions == 64
    enc = posenc.create("sinusoidal", dim=32, layout="concat")
    assert lm(enc).encoding is enc
    with pytest.raises(ValueError, match="model needs dim=32"):
        lm(posenc.create("sinusoidal", dim=16))
    with pytest.raises(ValueError, match="model needs dim=32"):
        lm({"name": "sinusoidal", "dim": 16})
    with pytest.raises(ValueError, match="needs a 'name' key"):
        lm({"dim": 32})
    with pytest.raises(ValueError, match="unknown encoding 'sinus'"):
        lm("sinus")


def test_bad_model_arguments():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        lm("nope", dim=30)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        lm("nope", n_kv_heads=3)
    with pytest.raises(ValueError, match="generate\\(\\) needs a causal model"):
        lm("nope", causal=False).generate(torch.zeros(1, 2, dtype=torch.long), 1)
    with pytest.raises(TypeError, match="input_ids must be an integer"):
        lm("nope")(torch.zeros(2, 3))


def test_trains():
    """A few steps of AdamW on a fixed batch lower the loss: gradients reach everything."""
    model = lm("learned")
    ids = torch.randint(0, 41, (4, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 41), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert model.encoding.weight.grad is not None


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_cache_positions_are_integers_and_a_plain_step_continues_from_them(static, model_tol):
    """After explicit positions 10..15, a step without positions sits at 16 (what a full
    forward at 10..16 gives), in a dynamic and a static cache; a mask alone would restart
    the count at 0: refused, naming positions."""
    model = lm("rope").eval()
    ids = torch.randint(0, 41, (1, 7))
    with pytest.raises(TypeError, match="KVCache stores integer positions"):
        model(ids, positions=torch.arange(7) + 0.5, cache=model.new_cache(1, 7, static=static))
    cache = model.new_cache(1, 7, static=static)
    with torch.no_grad():
        full = model(ids, positions=torch.arange(10, 17))
        head = model(ids[:, :6], positions=torch.arange(10, 16), cache=cache)
        with pytest.raises(ValueError, match="pass positions for the new tokens too"):
            model(ids[:, 6:], cache=cache, attention_mask=torch.ones(1, 7, dtype=torch.long))
        step = model(ids[:, 6:], cache=cache)
    assert cache.given_positions and cache.explicit_positions
    assert_close(torch.cat((head, step), 1), full, **model_tol(model, 7, full))
    with pytest.raises(ValueError, match="positions has batch size 2 but the input has 1"):
        model(ids, positions=torch.arange(7).expand(2, 7))


def test_mrope_ids_rotate_and_the_mask_follows_token_order(model_tol):
    """M-RoPE's [3, batch, seq] ids go to the rotation; the causal mask is by token order."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=37, dim=32, n_layers=2, n_heads=4, encoding="mrope").eval()
    image = 36
    ids = torch.tensor([[1, 2, image, image, image, image, 3, 4]])
    positions, delta = posenc.positions.multimodal(
        ids, torch.tensor([[1, 4, 4]]), image_token_id=image, video_token_id=35
    )
    with torch.no_grad():
        text = torch.arange(8)
        # text ids on all three axes: the 1-D positions (tables of other shapes, whose
        # cos/sin may round otherwise in another vector lane)
        same = model(ids, positions=text.expand(3, 1, 8))
        rounding = model_tol(model, 9, same)
        torch.testing.assert_close(same, model(ids, positions=text), **rounding)
        full = model(ids, positions=positions)
        assert not torch.allclose(full, same)  # the image's (t, h, w) ids count
        # prefill, then one token at a time with its ids (text after the image: n + delta)
        cache = model.new_cache(1, 9)
        steps = [model(ids[:, :5], positions=positions[..., :5], cache=cache)]
        for n in range(5, 8):
            steps.append(model(ids[:, n : n + 1], positions=positions[..., n : n + 1], cache=cache))
        torch.testing.assert_close(torch.cat(steps, dim=1), full, **rounding)
        assert positions[0, 0, 7] == 7 + delta.item()
    with pytest.raises(ValueError, match=r"positions has 7 positions.*sequence has 8"):
        model(ids, positions=positions[..., :7])


def test_head_is_untied_by_default_and_tied_on_request():
    untied, tied = lm("rope"), lm("rope", tie_embeddings=True)
    assert untied.head is not None and untied.head.weight.shape == (41, 32)
    assert untied.head.weight.data_ptr() != untied.embed.weight.data_ptr()
    assert tied.head is None and "head.weight" not in tied.state_dict()
    # a tied model's logits are the final hidden state against the embedding matrix
    ids = torch.randint(0, 41, (2, 7))
    hidden = {}
    tied.norm.register_forward_hook(lambda m, i, o: hidden.setdefault("h", o))
    torch.testing.assert_close(tied(ids), hidden["h"] @ tied.embed.weight.T)
    with pytest.raises(TypeError, match="tie_embeddings must be a bool"):
        lm("rope", tie_embeddings=1)


def test_init_keeps_unit_scale_and_divides_residual_writes():
    """Every linear at fan_in ** -0.5, the writes to the residual stream further divided by
    sqrt(2 n_layers); embeddings of unit variance once scaled by sqrt(dim). Sample standard
    deviations of thousands of draws are within 10% of the target (n >= 4096 entries: the
    relative error of a sample std is about 1 / sqrt(2 n) < 1.2%)."""
    torch.manual_seed(0)
    model = lm("nope", dim=64, n_layers=3, vocab_size=256)
    block = model.blocks[0]
    (qkv, up), (out, down) = block.projections()
    for linear, target in [
        (qkv, 64**-0.5),
        (up, 64**-0.5),
        (out, 64**-0.5 / 6**0.5),
        (down, 256**-0.5 / 6**0.5),
        (model.head, 64**-0.5),
    ]:
        assert linear.weight.std().item() == pytest.approx(target, rel=0.1)
    scaled = model.embed.weight * 64**0.5
    assert scaled.std().item() == pytest.approx(1.0, rel=0.1)


def test_xpos_positions_past_its_range_are_refused_in_a_model():
    """xPos holds positions within ``max_distance`` of its centre (33.7k at scale_base
    512 in float32): the model refuses what the encoding refuses, in its one read."""
    model = lm("xpos")
    ids = torch.randint(0, 41, (1, 8))
    enc = posenc.create("xpos", head_dim=8)
    far = torch.arange(8) + 10**5
    with pytest.raises(ValueError, match="xPos position 100007 is 100007 from center=0"):
        enc(torch.randn(1, 1, 8, 8), torch.randn(1, 1, 8, 8), positions=far)
    with pytest.raises(ValueError, match="xPos position 100007 is 100007 from center=0"):
        model(ids, positions=far)
    cache = model.new_cache(1, 8)
    with pytest.raises(ValueError, match="xPos position 100007"):
        model(ids, positions=far, cache=cache)
    assert cache.length == 0 and not cache.explicit_positions
    edge = torch.arange(8) + int(enc.max_distance()) - 7  # the last 8 it holds
    assert torch.isfinite(model(ids, positions=edge)).all()


@pytest.mark.parametrize("encoding", ["rope", "alibi", {"name": "learned", "max_positions": 6}])
def test_default_positions_read_only_the_token_ids(encoding, monkeypatch):
    """A forward and a cached decode step with default positions read one value check on
    the host, the token ids': the positions the model counts itself are checked from the
    shapes (a learned table's limit too), not read again."""
    import posenc.host_reads as host_reads

    batches: list[int] = []
    read_all = host_reads._read_all

    def counted(items):
        batches.append(len(items))
        read_all(items)

    monkeypatch.setattr(host_reads, "_read_all", counted)
    model = TransformerLM(32, 16, 2, 2, encoding).eval()
    cache = model.new_cache(1, 8)
    model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
    model(torch.zeros(1, 1, dtype=torch.long), cache=cache)
    model(torch.zeros(1, 4, dtype=torch.long))
    assert batches == [1, 1, 1]
    if isinstance(encoding, dict):  # positions 4 .. 6 past the table's 6 rows
        with pytest.raises(posenc.PositionOutOfRangeError, match="6"):
            model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
        assert cache.length == 4
