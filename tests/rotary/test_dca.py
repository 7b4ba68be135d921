"""``dca`` (Dual Chunk Attention) against a float64 reference written from the engines'
definitions (vLLM's and SGLang's ``DualChunkRotaryEmbedding`` and dual-chunk flash
attention), stated here as formulas:

- chunks of ``s = chunk_size − local_size`` positions; a key at j turns by ``j mod s``;
- a query at i turns by ``i mod s`` against the keys of its chunk (``j <= i``), by
  ``min(i mod s + s, C)`` against the chunk before, by ``min(2s − 1, C)`` against earlier
  chunks;
- each region is its own softmax attention, and the three outputs are merged by their
  log-sum-exp (as the engines merge their three flash-attention calls);
- past ``original_max_position_embeddings`` L₀, q and k each times ``0.1·ln(n/L₀) + 1``.

The reference is float64; posenc runs float32 with float32 angle tables, so outputs agree
to a few float32 roundings of O(1) values (atol 1e-5).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.functional.dca import dca_length_factor, dca_query_positions, dca_region

ATOL = 1e-5


def rotate_ref(x: torch.Tensor, pos: torch.Tensor, base: float, layout: str, rot: int):
    """x turned by RoPE at pos (float64): ``[b, h, L, d]``, pos ``[L]``."""
    x = x.double()
    n = rot // 2
    inv = base ** (-2.0 * torch.arange(n, dtype=torch.float64) / rot)
    ang = pos.double()[:, None] * inv  # [L, n]
    cos, sin = ang.cos(), ang.sin()
    if layout == "half":
        a, b = x[..., :n], x[..., n:rot]
        turned = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    else:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        turned = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return torch.cat((turned, x[..., rot:]), dim=-1)


def dca_ref(q, k, v, qpos, kpos, C, w, base=10000.0, layout="half", rot=None, orig=None):
    """Three attentions, one per region, merged by log-sum-exp (float64)."""
    d = q.shape[-1]
    rot = d if rot is None else rot
    s = C - w
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, 1)
    v = v.repeat_interleave(group, 1).double()
    kr = rotate_ref(k, kpos % s, base, layout, rot)
    turns = (qpos % s, (qpos % s + s).clamp(max=C), torch.full_like(qpos, min(2 * s - 1, C)))
    factor = dca_length_factor_ref(k.shape[2], orig)
    scale = factor**2 / math.sqrt(d)
    cq, ck = (qpos // s)[:, None], (kpos // s)[None, :]
    regions = ((cq == ck) & (kpos[None] <= qpos[:, None]), cq - ck == 1, cq - ck >= 2)
    outs, lses = [], []
    for turn, region in zip(turns, regions, strict=True):
        qr = rotate_ref(q, turn, base, layout, rot)
        scores = (qr @ kr.transpose(-1, -2) * scale).masked_fill(~region, -math.inf)
        lse = scores.logsumexp(-1, keepdim=True)  # -inf for a row with no key here
        probs = torch.where(region, (scores - lse).exp(), 0.0)
        outs.append(probs @ v)
        lses.append(lse)
    lse = torch.stack(lses).logsumexp(0)
    return sum(
        torch.where(torch.isinf(part), 0.0, (part - lse).exp()) * o
        for part, o in zip(lses, outs, strict=True)
    )


def dca_length_factor_ref(n, orig):
    return 1.0 if orig is None else max(1.0, 0.1 * math.log(n / orig) + 1.0)


def qkv(length, heads=2, kv_heads=2, d=16, batch=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, d, generator=g)
    k = torch.randn(batch, kv_heads, length, d, generator=g)
    v = torch.randn(batch, kv_heads, length, d, generator=g)
    return q, k, v


@pytest.mark.parametrize("length", [7, 8, 9, 16, 17, 40])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_equals_the_merged_reference_below_at_and_past_the_chunk(length, layout):
    # C = 12, w = 4: chunks of 8; 40 tokens reach five chunks (intra, succ and inter)
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4, layout=layout)
    q, k, v = qkv(length)
    pos = torch.arange(length)
    out = posenc.attention(q, k, v, dca)
    assert_close(out.double(), dca_ref(q, k, v, pos, pos, 12, 4, layout=layout), atol=ATOL, rtol=0)


def test_grouped_queries_partial_rotary_and_base():
    dca = posenc.create(
        "dca", head_dim=16, chunk_size=10, local_size=3, base=500.0, partial_rotary_factor=0.5
    )
    q, k, v = qkv(30, heads=4, kv_heads=2)
    pos = torch.arange(30)
    ref = dca_ref(q, k, v, pos, pos, 10, 3, base=500.0, rot=8)
    assert_close(posenc.attention(q, k, v, dca).double(), ref, atol=ATOL, rtol=0)


def test_a_kv_cache_decode_equals_the_prefill_rows():
    """Decoding one token at a time over the cached (unrotated) keys gives the rows of
    attention over the whole sequence, past several chunk boundaries."""
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = qkv(30)
    full = posenc.attention(q, k, v, dca)
    cache = posenc.KVCache(n_layers=1, batch=1, kv_heads=2, head_dim=16, max_seq_len=30)
    steps = []
    for start, end in [(0, 5)] + [(t, t + 1) for t in range(5, 30)]:  # a prompt, then tokens
        keys, values = cache.update(0, k[:, :, start:end], v[:, :, start:end])  # unrotated
        steps.append(posenc.attention(q[:, :, start:end], keys, values, dca))
        cache.advance(end - start)
    assert_close(torch.cat(steps, dim=2), full, atol=ATOL, rtol=0)


def test_batched_positions_and_padding():
    """Each row of ``[batch, seq]`` positions cuts its own chunks; padded keys are hidden."""
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = qkv(20, batch=2)
    pos = torch.stack((torch.arange(20), torch.arange(20) + 5))
    out = posenc.attention(q, k, v, dca, q_positions=pos, k_positions=pos)
    for b in range(2):
        ref = dca_ref(q[b : b + 1], k[b : b + 1], v[b : b + 1], pos[b], pos[b], 12, 4)
        assert_close(out[b : b + 1].double(), ref, atol=ATOL, rtol=0)
    pad = torch.ones(2, 20, dtype=torch.bool)
    pad[1, :3] = False  # left padding: the first three keys of row 1 hidden
    padded = posenc.attention(q, k, v, dca, key_padding_mask=pad)
    ref = dca_ref(
        q[1:, :, 3:], k[1:, :, 3:], v[1:, :, 3:], torch.arange(3, 20), torch.arange(3, 20), 12, 4
    )
    assert_close(padded[1:, :, 3:].double(), ref, atol=ATOL, rtol=0)


def test_the_length_factor_tempers_past_the_original_length():
    dca = posenc.create(
        "dca", head_dim=16, chunk_size=12, local_size=4, original_max_position_embeddings=10
    )
    q, k, v = qkv(30)
    pos = torch.arange(30)
    ref = dca_ref(q, k, v, pos, pos, 12, 4, orig=10)
    assert_close(posenc.attention(q, k, v, dca).double(), ref, atol=ATOL, rtol=0)
    assert dca_length_factor(30, 10) == pytest.approx(0.1 * math.log(3) + 1)
    assert dca_length_factor(10, 10) == 1.0 and dca_length_factor(5, None) == 1.0


def test_no_distance_exceeds_the_chunk_size():
    """The property DCA exists for: every (query, key) pair's relative position, after the
    maps, lies in [0, C], at any length."""
    C, w = 12, 4
    s = C - w
    pos = torch.arange(200)
    turns = torch.stack(dca_query_positions(pos, C, w))  # [3, L]
    region = dca_region(pos, pos, s)  # [L, L]
    q_of_pair = torch.stack([turns[r][:, None].expand(-1, 200) for r in range(3)])
    chosen = q_of_pair.gather(0, region.unsqueeze(0))[0]  # [L, L]
    distance = chosen - (pos % s)[None, :]
    causal = pos[None, :] <= pos[:, None]
    assert distance[causal].min() >= 0 and distance[causal].max() <= C
    # and within a query's own chunk, and w into the next, distances are the true ones
    near = causal & (pos[:, None] - pos[None, :] <= w)
    assert torch.equal(distance[near], (pos[:, None] - pos[None, :]).expand(200, 200)[near])


def test_within_one_chunk_it_is_rope():
    dca = posenc.create("dca", head_dim=16, chunk_size=64, local_size=8)
    rope = posenc.create("rope", head_dim=16)
    q, k, v = qkv(40)
    assert_close(posenc.attention(q, k, v, dca), posenc.attention(q, k, v, rope), atol=ATOL, rtol=0)
    q2, k2 = dca(q, k)
    r2 = rope(q, k)
    assert_close(q2, r2[0])
    assert_close(k2, r2[1])


def test_gradients_reach_q_k_v():
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = (t.requires_grad_() for t in qkv(30))
    out = posenc.attention(q, k, v, dca)
    out.square().sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chunk_size": 8, "local_size": 8}, "local_size"),
        ({"chunk_size": 1}, "chunk_size"),
        ({"local_size": -1}, "local_size"),
        ({"scaling": {"rope_type": "linear", "factor": 2.0}}, "no scaling"),
        ({"original_max_position_embeddings": 0}, "original_max_position_embeddings"),
    ],
)
def test_bad_config_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        posenc.create("dca", head_dim=16, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"causal": False}, "causal=False"),
        ({"window": 4}, "window"),
        ({"softcap": 30.0}, "softcap"),
        ({"backend": "sdpa"}, "backend"),
        # 0 is a window, a chunk, a softcap given, never one absent
        ({"window": 0}, "window"),
        ({"chunk": 0}, "chunk"),
        ({"softcap": 0.0}, "softcap"),
        ({"window": False}, "window"),
    ],
)
def test_attention_refuses_what_dca_cannot_take(kwargs, match):
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = qkv(10)
    with pytest.raises(ValueError, match=match):
        posenc.attention(q, k, v, dca, **kwargs)


@pytest.mark.parametrize("width", [8, 32])
@pytest.mark.parametrize("backend", ["auto", "math"])
def test_q_and_k_of_another_head_size_are_refused(width, backend):
    """A dca of head_dim 16 would turn only the first 16 of 32 channels (or fail inside
    torch on 8): each must be refused by name."""
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = qkv(10, d=width)
    with pytest.raises(ValueError, match=r"q must be .* head_dim=16"):
        posenc.attention(q, k, v, dca, backend=backend)


@pytest.mark.parametrize("v_width", [4, 16, 56])
def test_values_of_another_width_give_their_width(v_width):
    """v may be narrower or wider than q and k (as in plain attention): both paths give
    the reference, ``v_width`` wide (the chunked path once cut 16 channels whatever v's)."""
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, _ = qkv(30)
    v = torch.randn(1, 2, 30, v_width, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(30)
    ref = dca_ref(q, k, v, pos, pos, 12, 4)
    for backend in ("auto", "math"):
        out = posenc.attention(q, k, v, dca, backend=backend)
        assert out.shape == (1, 2, 30, v_width)
        assert_close(out.double(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("seq_len", "error"), [("a", TypeError), (0, ValueError)])
def test_rotation_checks_its_seq_len(seq_len, error):
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    with pytest.raises(error, match="seq_len"):
        dca.rotation(torch.arange(10), seq_len)
    expected = posenc.create("rope", head_dim=16).rotation(torch.arange(10) % 8)
    for got, want in zip(dca.rotation(torch.arange(10), 10), expected, strict=True):
        assert torch.equal(got, want)


def test_float_positions_are_refused():
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = qkv(10)
    with pytest.raises(TypeError, match="q_positions"):
        posenc.attention(q, k, v, dca, q_positions=torch.arange(10.0))


@pytest.mark.parametrize(
    ("q_len", "k_len", "heads", "kv_heads"),
    [(40, 40, 2, 2), (1, 40, 4, 2), (13, 40, 4, 1), (3, 7, 2, 2), (9, 24, 2, 2)],
)
def test_the_chunked_sdpa_path_equals_the_explicit_one(q_len, k_len, heads, kv_heads):
    """At the default positions posenc.attention runs one SDPA call per chunk of queries
    (the regions' queries joined along the head); backend="math" runs the explicit softmax
    by rows. Both give the reference, for a prefill, a decode step and a chunk of both."""
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q = qkv(q_len, heads, kv_heads)[0]
    _, k, v = qkv(k_len, heads, kv_heads, seed=1)
    fused = posenc.attention(q, k, v, dca)
    explicit = posenc.attention(q, k, v, dca, backend="math")
    assert_close(fused, explicit, atol=ATOL, rtol=0)
    qp, kp = torch.arange(k_len - q_len, k_len), torch.arange(k_len)
    assert_close(fused.double(), dca_ref(q, k, v, qp, kp, 12, 4), atol=ATOL, rtol=0)


def test_bfloat16_runs_both_paths_to_its_rounding():
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    q, k, v = (t.bfloat16() for t in qkv(30))
    pos = torch.arange(30)
    ref = dca_ref(q.float(), k.float(), v.float(), pos, pos, 12, 4)
    for backend in ("auto", "math"):
        out = posenc.attention(q, k, v, dca, backend=backend)
        assert out.dtype == torch.bfloat16
        # bf16 rotated q and k (8 bits) and SDPA in bf16: a few bf16 ulps of O(1) outputs
        assert_close(out.double(), ref, atol=3e-2, rtol=0)


def test_rerotating_a_dca_cache_is_refused():
    """Its cache holds unrotated keys: turning them would corrupt them."""
    dca = posenc.create("dca", head_dim=16, chunk_size=12, local_size=4)
    cache = posenc.KVCache(n_layers=1, batch=1, kv_heads=2, head_dim=16, max_seq_len=8)
    cache.update(0, *qkv(4)[1:])
    cache.advance(4)
    with pytest.raises(TypeError, match="unrotated"):
        cache.rerotate(dca, delta=1)
