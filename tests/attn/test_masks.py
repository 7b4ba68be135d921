"""attention() with padding and packed documents, on every backend and encoding kind.

The main check is the one a user relies on: a packed row of documents, padded at the end,
gives each document exactly what attention gives it alone (its own positions from
``from_segments``, a segment mask, a padding mask). Float results are compared within
the bound of float32 rounding that ``attention_tol`` (tests/conftest.py) works out from the
scores and values, once per side; a wrong mask changes outputs by a visible fraction of them.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn.masks import Masks
from posenc.attn.runners.linear import SMALL_Q
from posenc.positions import from_segments

HEADS, HEAD_DIM = 4, 8
DOCS = (5, 7)  # two documents packed in one row, then padding
PAD = 3
BIAS = ["alibi", "t5", "shaw", "kerple", "fire"]
#: roundings of each score term from rotating q and k (RoPE's tables and products)
ROTATION_ROUNDINGS = 8


@pytest.fixture
def bound(attention_tol):
    """``bound(q, k, v, enc, positions, allowed)``: the rounding bound of the outputs of the
    packed batch, twice (both sides are rounded), with the encoding's bias or rotation."""

    def tolerance(q, k, v, enc, positions, allowed):
        bias, extra = None, 0
        if enc is not None and enc.kind == "bias":
            bias = enc.bias(positions, positions, q=q, scale=HEAD_DIM**-0.5)  # [b, h, q, k]
        elif enc is not None:
            extra = ROTATION_ROUNDINGS
        q, k, v = q.detach(), k.detach(), v.detach()
        t = attention_tol(q, k, v, bias=bias, allowed=allowed, extra_n=extra)
        return {"atol": 2 * t["atol"], "rtol": 0.0}

    return tolerance


def packed_mask(segments, real, positions, causal=True):
    return Masks.build(real, segments, *segments.shape, segments.shape[1]).dense(
        positions, positions, causal
    )


def make(name: str, kv_heads: int = HEADS) -> posenc.Encoding | None:
    if name == "none":
        return None
    config = {"rope": {"head_dim": HEAD_DIM}, "shaw": {"n_heads": HEADS, "head_dim": HEAD_DIM}}
    enc = posenc.create(name, **config.get(name, {"n_heads": HEADS}))
    with torch.no_grad():  # parameters away from their (often zero) initial values
        for p in enc.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return enc


def packed_batch(kv_heads: int = HEADS, lengths=DOCS, pad=PAD, dtype=torch.float32):
    """q, k, v of one packed row ``[doc 0, doc 1, pad]`` and a second row of one document,
    with segment ids, the padding mask and the positions of each document."""
    seq = sum(lengths) + pad
    q = torch.randn(2, HEADS, seq, HEAD_DIM, dtype=dtype)
    k = torch.randn(2, kv_heads, seq, HEAD_DIM, dtype=dtype)
    v = torch.randn(2, kv_heads, seq, HEAD_DIM, dtype=dtype)
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)] + [torch.full((pad,), 9)])
    segments = torch.stack((ids, torch.zeros(seq, dtype=torch.long)))
    real = torch.ones(2, seq, dtype=torch.bool)
    real[0, -pad:] = False
    return q, k, v, segments, real, from_segments(segments, real)


def alone(q, k, v, enc, start, n, row=0, **kwargs):
    """attention over tokens ``start .. start + n`` of ``row`` alone, default positions."""
    part = slice(start, start + n)
    return posenc.attention(
        q[row : row + 1, :, part], k[row : row + 1, :, part], v[row : row + 1, :, part], enc,
        **kwargs,
    )  # fmt: skip


def assert_packed_equals_alone(name, backend, bound, kv_heads=HEADS, lengths=DOCS, grad=False):
    enc = make(name)
    q, k, v, segments, real, positions = packed_batch(kv_heads, lengths)
    kwargs = {} if backend == "auto" else {"backend": backend}
    tol = bound(q, k, v, enc, positions, packed_mask(segments, real, positions))
    with torch.set_grad_enabled(grad):
        out = posenc.attention(
            q, k, v, enc, q_positions=positions, k_positions=positions,
            key_padding_mask=real, segment_ids=segments, **kwargs,
        )  # fmt: skip
        start = 0
        for n in lengths:
            expected = alone(q, k, v, enc, start, n, **kwargs)
            assert_close(out[:1, :, start : start + n], expected, **tol)
            start += n
        seq = q.shape[2]
        assert_close(out[1:], alone(q, k, v, enc, 0, seq, row=1, **kwargs), **tol)
    # the pads see no real token: as queries they see only pads, which are hidden
    assert torch.equal(out[0, :, start:], torch.zeros_like(out[0, :, start:]))


@pytest.mark.parametrize("kv_heads", [HEADS, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("name", ["none", "rope"])
def test_packed_equals_alone_rotary_and_none(name, kv_heads, bound):
    assert_packed_equals_alone(name, "auto", bound, kv_heads)


@pytest.mark.parametrize("backend", ["auto", "sdpa", "math"])
@pytest.mark.parametrize("name", BIAS)
def test_packed_equals_alone_bias(name, backend, bound):
    if name == "shaw" and backend == "sdpa":
        pytest.skip("Shaw adds to the values: only the math path runs it")
    assert_packed_equals_alone(name, backend, bound, kv_heads=2)


#: a score_mod compiles for 20-60 s on a cold inductor cache, as a clean CI machine has it
#: (FIRE's unrolled 32-unit MLP the longest), and the index positions compile their own:
#: the default suite runs ALiBi's with explicit positions, ``make test-slow`` every case
FLEX_BIAS = [
    (n, explicit)
    if (n, explicit) == ("alibi", True)
    else pytest.param(n, explicit, marks=pytest.mark.slow)
    for n in BIAS
    for explicit in (True, False)
]


@pytest.mark.parametrize(("name", "explicit"), FLEX_BIAS)
def test_flex_with_segments_equals_sdpa(name, explicit, backends, bound):
    """Flex attention's block mask (padding, segments, causal) against the SDPA path, with
    the packed positions given (``explicit``) or the index positions."""
    if name == "shaw":
        pytest.skip("Shaw adds to the values: only the math path runs it")
    if "flex" not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    enc = make(name)
    q, k, v, segments, real, positions = packed_batch(kv_heads=2, lengths=(20, 30), pad=14)
    tol = bound(q, k, v, enc, positions, packed_mask(segments, real, positions))
    common = {"key_padding_mask": real, "segment_ids": segments}
    if explicit:
        common.update(q_positions=positions, k_positions=positions)
    with torch.no_grad():
        flex = posenc.attention(q, k, v, enc, backend="flex", **common)
        sdpa = posenc.attention(q, k, v, enc, backend="sdpa", **common)
    assert_close(flex, sdpa, **tol)


def test_alibi_fused_path_takes_the_masks(bound):
    """Training ALiBi on the CPU takes its fused SDPA path (with the centring coordinates
    from ``SMALL_Q`` queries up); with masks it equals each document alone."""
    lengths = (SMALL_Q + 3, SMALL_Q + 9)
    assert_packed_equals_alone("alibi", "auto", bound, kv_heads=2, lengths=lengths, grad=True)


@pytest.mark.parametrize("name", ["none", "rope", "alibi", "t5", "shaw"])
def test_kv_cache_queries_and_keys_carry_their_own_ids(name, bound):
    """With cached keys, ``(q_segment_ids, k_segment_ids)``: the last queries of a packed
    row see the cached keys of their own document only."""
    enc = make(name)
    q, k, v, segments, real, positions = packed_batch()
    common = {"key_padding_mask": real, "q_positions": positions, "k_positions": positions}
    full = posenc.attention(q, k, v, enc, segment_ids=segments, **common)
    last = slice(8, None)  # queries 8.. (inside the second document and the padding)
    common["q_positions"] = positions[:, last]
    step = posenc.attention(
        q[:, :, last], k, v, enc, segment_ids=(segments[:, last], segments), **common
    )
    tol = bound(q, k, v, enc, positions, packed_mask(segments, real, positions))
    assert_close(step, full[:, :, last], **tol)


@pytest.mark.parametrize(
    ("name", "backend"),
    [("none", "auto"), ("rope", "auto"), ("alibi", "auto"), ("t5", "sdpa"), ("shaw", "math")],
)
def test_rows_that_see_nothing_give_zeros_and_zero_gradients(name, backend):
    """A row of pads only: zeros forward, finite (zero) gradients backward, never NaN."""
    enc = make(name)
    seq = SMALL_Q + 4  # long enough for ALiBi's fused path
    q, k, v = (torch.randn(2, HEADS, seq, HEAD_DIM, requires_grad=True) for _ in range(3))
    real = torch.ones(2, seq, dtype=torch.bool)
    real[1] = False  # the second row is all padding
    real[0, :3] = False  # left padding: its first queries see no real key
    kwargs = {} if backend == "auto" else {"backend": backend}
    out = posenc.attention(q, k, v, enc, key_padding_mask=real, **kwargs)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(out[0, :, :3], torch.zeros_like(out[0, :, :3]))
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[1], torch.zeros_like(t.grad[1]))  # nothing flows from pads
    params = [] if enc is None else [p.grad for p in enc.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in params)


def test_padding_mask_hides_keys_for_every_query(attention_tol):
    q, k, v = (torch.randn(1, HEADS, 6, HEAD_DIM) for _ in range(3))
    real = torch.tensor([[True, False, True, True, False, True]])
    out = posenc.attention(q, k, v, causal=False, key_padding_mask=real)
    keep = real[0]
    pos = torch.arange(6)
    expected = posenc.attention(
        q, k[:, :, keep], v[:, :, keep], causal=False, q_positions=pos, k_positions=pos[keep]
    )
    tol = attention_tol(q, k, v, allowed=real[:, None, None, :])
    assert_close(out, expected, atol=2 * tol["atol"], rtol=0)


def test_masks_combine_with_explicit_positions_and_bidirectional_attention(bound):
    """Without the causal mask, a document sees all of itself and nothing else."""
    q, k, v, segments, real, positions = packed_batch()
    out = posenc.attention(
        q, k, v, causal=False, key_padding_mask=real, segment_ids=segments,
        q_positions=positions, k_positions=positions,
    )  # fmt: skip
    expected = alone(q, k, v, None, 0, DOCS[0], causal=False)
    tol = bound(q, k, v, None, positions, packed_mask(segments, real, positions, causal=False))
    assert_close(out[:1, :, : DOCS[0]], expected, **tol)


def test_dense_mask_and_mask_mod_agree():
    """The flex mask_mod is the dense mask, element by element."""
    _, _, _, segments, real, positions = packed_batch()
    seq = segments.shape[1]
    masks = Masks.build(real, segments, 2, seq, seq)
    dense = masks.dense(positions, positions, causal=True)  # [b, 1, q, k]
    mod = masks.mask_mod(positions, positions, 0, causal=True)
    b, qi, ki = torch.meshgrid(torch.arange(2), torch.arange(seq), torch.arange(seq), indexing="ij")
    assert torch.equal(mod(b, torch.zeros_like(b), qi, ki), dense[:, 0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"key_padding_mask": torch.ones(2, 6)}, TypeError, "key_padding_mask must be a bool"),
        ({"key_padding_mask": torch.ones(2, 5, dtype=torch.bool)}, ValueError, "key_padding"),
        ({"key_padding_mask": torch.ones(6, dtype=torch.bool)}, ValueError, "key_padding"),
        ({"segment_ids": torch.zeros(2, 6)}, TypeError, "segment_ids .* integer"),
        ({"segment_ids": torch.zeros(2, 5, dtype=torch.long)}, ValueError, "segment_ids"),
        ({"segment_ids": (torch.zeros(2, 6, dtype=torch.long),)}, ValueError, "a pair"),
    ],
)
def test_bad_masks(kwargs, error, match):
    q, k, v = (torch.randn(2, HEADS, 6, HEAD_DIM) for _ in range(3))
    with pytest.raises(error, match=match):
        posenc.attention(q, k, v, **kwargs)


def test_one_tensor_of_segment_ids_needs_equal_lengths():
    q = torch.randn(1, HEADS, 2, HEAD_DIM)
    k = v = torch.randn(1, HEADS, 6, HEAD_DIM)
    with pytest.raises(ValueError, match=r"pass \(q_segment_ids, k_segment_ids\)"):
        posenc.attention(q, k, v, segment_ids=torch.zeros(1, 6, dtype=torch.long))


def test_positions_shared_by_the_batch_reach_flex_with_masks(backends, bound):
    """``[1, len]`` positions stand for every sequence, also where flex reads them per
    sequence (its block mask and score_mod): the same result as ``[batch, len]``."""
    if "flex" not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    enc = make("alibi")
    seq = 256  # auto takes flex from 256 x 256 scores
    q, k, v = (torch.randn(2, HEADS, seq, HEAD_DIM) for _ in range(3))
    real = torch.ones(2, seq, dtype=torch.bool)
    real[1, :5] = False
    shared = torch.arange(seq)[None]
    with torch.no_grad():
        out = posenc.attention(
            q, k, v, enc, q_positions=shared, k_positions=shared, key_padding_mask=real
        )
        full = shared.expand(2, seq)
        sdpa = posenc.attention(
            q, k, v, enc, q_positions=full, k_positions=full, key_padding_mask=real, backend="sdpa"
        )
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril() & real[:, None, None, :]
    assert_close(out, sdpa, **bound(q, k, v, enc, full, allowed))


def test_masks_on_the_meta_device_and_on_another_device():
    q = torch.randn(1, HEADS, 6, HEAD_DIM, device="meta")
    real = torch.ones(1, 6, dtype=torch.bool, device="meta")
    assert posenc.attention(q, q, q, key_padding_mask=real).shape == q.shape  # no value read
    with pytest.raises(ValueError, match="key_padding_mask is on meta but k is on cpu"):
        x = torch.randn(1, HEADS, 6, HEAD_DIM)
        posenc.attention(x, x, x, key_padding_mask=real)


def test_the_default_context_is_built_once_per_shape():
    """A call with no positions or masks takes the context of the last such call of its
    lengths, batch and device (its dense mask, once built, with it); inference mode keeps
    its own, and a large call builds its own each time."""
    from posenc.attn import masks as masks_module
    from posenc.attn.masks import DEFAULT_CONTEXT_SCORES, AttentionContext

    cpu = torch.device("cpu")
    masks_module._DEFAULTS.clear()  # kept ones of earlier tests: a full store evicts its latest
    first = AttentionContext.default(3, 5, 2, cpu)
    assert AttentionContext.default(3, 5, 2, cpu) is first
    assert AttentionContext.default(3, 5, 1, cpu) is not first
    built = AttentionContext.build(3, 5, 2, cpu)
    assert torch.equal(first.positions.q, built.positions.q)
    assert torch.equal(first.positions.k, built.positions.k)
    assert first.masks is None and not first.positions.explicit
    assert first.allowed(causal=True) is AttentionContext.default(3, 5, 2, cpu).allowed(True)
    with torch.inference_mode():
        inside = AttentionContext.default(3, 5, 2, cpu)
    assert inside is not first and inside.positions.q.is_inference()
    n = int(DEFAULT_CONTEXT_SCORES**0.5) + 1
    assert AttentionContext.default(n, n, 1, cpu) is not AttentionContext.default(n, n, 1, cpu)
    for k_len in range(6, 6 + 2 * masks_module.DEFAULT_CONTEXTS):  # decoding: bounded
        AttentionContext.default(1, k_len, 1, cpu)
    assert len(masks_module._DEFAULTS) <= masks_module.DEFAULT_CONTEXTS
    with pytest.raises(ValueError, match="pass q_positions and k_positions"):
        AttentionContext.default(6, 5, 1, cpu)
