"""RoPE's cached cos/sin tables (posenc.rotary.tables) and the one-pass rotation of q and k:
what makes a RoPE call cheap, checked as values (every row equals the uncached
computation, every output the reference's) and as facts (made once, kept out of the
state_dict, dropped by .to() and a new config, never filled by a trace or a fake tensor)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tests.test_host_reads import reads
from torch._subclasses.fake_tensor import FakeTensorMode

import posenc
from posenc.functional.rope import (
    narrow_tables,
    rope_cos_sin,
    rotate_pairs,
    rotate_qk,
    rotate_wide,
    widen_tables,
)
from posenc.rotary import tables as tables_mod

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
CONFIGS = [
    {"head_dim": 16},
    {"head_dim": 16, "layout": "interleaved"},
    {"head_dim": 16, "scaling": YARN},
    {"head_dim": 16, "partial_rotary_factor": 0.5},
    {"head_dim": 16, "rotary_dim": 8, "rotary_at": "end"},
    {"head_dim": 16, "base": 500000.0, "scaling": {"rope_type": "linear", "factor": 8.0}},
]


def rope(**config):
    return posenc.create("rope", **config)


def reference(enc, q, k, positions, k_positions):
    """q and k turned by rotation() of explicit positions, each alone: the uncached path."""
    return enc.rotate(q, enc.rotation(positions)), enc.rotate(k, enc.rotation(k_positions), True)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize(("offset", "length"), [(0, 1), (0, 64), (5, 3), (63, 2), (100, 200)])
def test_table_rows_equal_the_uncached_rotation(config, offset, length):
    enc = rope(**config)
    enc.default_rotation(1)  # a small table first: the call below grows it
    cos, sin = enc.default_rotation(length, offset=offset)
    want_cos, want_sin = enc.rotation(torch.arange(offset, offset + length))
    assert cos.dtype == want_cos.dtype == torch.float32
    assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize(
    ("q_shape", "k_shape"),
    [
        ((1, 2, 1, 16), (1, 2, 1, 16)),  # a decode step: one pass, split without a copy
        ((3, 4, 5, 16), (3, 2, 5, 16)),  # a batch, grouped keys: the rows stacked
        ((2, 2, 3, 16), (2, 2, 7, 16)),  # queries the last 3 of 7 keys
        ((1, 4, 1100, 16), (1, 4, 1100, 16)),  # past the one-pass size: each compiled
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_forward_at_default_positions_equals_the_reference(config, q_shape, k_shape, dtype):
    torch.manual_seed(0)
    enc = rope(**config)
    q, k = torch.randn(q_shape).to(dtype), torch.randn(k_shape).to(dtype)
    q_len, k_len = q_shape[2], k_shape[2]
    want = reference(enc, q, k, torch.arange(k_len - q_len, k_len), torch.arange(k_len))
    for _ in range(2):  # the table's first call and a later one
        got = enc(q, k)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype and g.is_contiguous()
            assert torch.equal(g, w)


def test_rotate_qk_equals_each_tensor_rotated_alone():
    torch.manual_seed(1)
    cos, sin = rope_cos_sin(torch.arange(6), torch.rand(8))
    q, k = torch.randn(3, 4, 6, 16), torch.randn(3, 2, 6, 16)
    for layout in ("half", "interleaved"):
        q2, k2 = rotate_qk(q, k, cos, sin, layout)
        assert torch.equal(q2, rotate_pairs(q, cos, sin, layout))
        assert torch.equal(k2, rotate_pairs(k, cos, sin, layout))
        wide = widen_tables(cos, sin, layout)
        assert torch.equal(rotate_qk(q, k, *wide, layout, wide=True)[0], q2)
        narrow = narrow_tables(*wide, layout)
        assert torch.equal(narrow[0], cos) and torch.equal(narrow[1], sin)


def test_rotate_pairs_is_the_pair_formula_to_the_bit():
    """(a, b) -> (a·cos − b·sin, b·cos + a·sin), each product rounded, written out pair by
    pair: rotate_pairs computes it, and rotate_wide's widened tables and swap change no
    bit."""
    torch.manual_seed(2)
    cos, sin = torch.randn(5, 4), torch.randn(5, 4)
    x = torch.randn(2, 3, 5, 8)
    halves = (x[..., :4], x[..., 4:])
    pairs = (x[..., 0::2], x[..., 1::2])
    for layout, (a, b) in (("half", halves), ("interleaved", pairs)):
        first, second = a * cos - b * sin, b * cos + a * sin
        for out in (
            rotate_pairs(x, cos, sin, layout),
            rotate_wide(x, *widen_tables(cos, sin, layout), layout),
        ):
            got = (
                (out[..., :4], out[..., 4:])
                if layout == "half"
                else (out[..., 0::2], out[..., 1::2])
            )
            assert torch.equal(got[0], first) and torch.equal(got[1], second)


def test_the_table_is_made_once_and_grown_by_length():
    enc = rope(head_dim=8)
    first, _ = enc.default_rotation(3)
    again, _ = enc.default_rotation(2, offset=7)
    assert first.untyped_storage().data_ptr() == again.untyped_storage().data_ptr()
    longer, _ = enc.default_rotation(100)  # past 64 rows: a new table of 128
    assert longer.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    assert longer.untyped_storage().nbytes() == 128 * 8 * 4  # widened: 2n = 8 channels


def test_past_the_table_limit_rows_are_computed(monkeypatch):
    monkeypatch.setattr(tables_mod, "TABLE_LIMIT", 16)
    enc = rope(head_dim=8)
    cos, sin = enc.default_rotation(4, offset=14)
    want = enc.rotation(torch.arange(14, 18))
    assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])
    assert not enc._tables._by_device  # nothing kept


def test_the_table_is_not_state_and_to_drops_it():
    enc = rope(head_dim=8)
    enc.default_rotation(4)
    assert enc.state_dict() == {} and enc._tables._by_device
    enc.to(torch.bfloat16)  # a model's cast cannot round the table: it is dropped
    assert not enc._tables._by_device
    cos, _ = enc.default_rotation(4)
    assert cos.dtype == torch.float32 and torch.equal(cos, enc.rotation(torch.arange(4))[0])


def test_a_new_config_makes_a_new_table():
    enc = rope(head_dim=8)
    before, _ = enc.default_rotation(4)
    enc.config = dataclasses.replace(enc.config, base=100.0)
    after, _ = enc.default_rotation(4)
    assert torch.equal(after, rope(head_dim=8, base=100.0).rotation(torch.arange(4))[0])
    assert not torch.equal(before, after)


def test_a_table_made_under_inference_mode_serves_training():
    enc = rope(head_dim=8)
    with torch.inference_mode():
        enc(torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8))
    q = torch.randn(1, 1, 4, 8, requires_grad=True)
    q2, k2 = enc(q, torch.randn(1, 1, 4, 8))
    (q2.square().sum() + k2.sum()).backward()
    assert torch.allclose(q.grad, 2 * q, atol=1e-5)  # a rotation keeps norms: d|Rq|²/dq = 2q


def test_default_positions_are_not_read():
    enc = rope(head_dim=8, scaling=YARN)
    q = torch.randn(1, 2, 3, 8)
    assert reads(lambda: enc(q, q)) == []
    assert reads(lambda: enc.default_rotation(5, offset=2)) == []


def test_fake_tensors_and_traces_neither_read_nor_fill_the_table():
    enc = rope(head_dim=8)
    with FakeTensorMode():
        q = torch.randn(1, 2, 3, 8)
        out, _ = enc(q, q)
        assert out.shape == (1, 2, 3, 8)
    assert not enc._tables._by_device
    compiled = torch.compile(enc, fullgraph=True, backend="eager")
    q = torch.randn(1, 2, 3, 8)
    got = compiled(q, q)
    assert not enc._tables._by_device
    assert torch.equal(got[0], enc(q, q)[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seq_len": -1}, ValueError, "seq_len"),
        ({"seq_len": 2.0}, TypeError, "seq_len"),
        ({"seq_len": 2, "offset": -1}, ValueError, "offset"),
        ({"seq_len": 2, "offset": True}, TypeError, "offset"),
        ({"seq_len": 2, "total_len": 0}, ValueError, "total_len"),
        ({"seq_len": 2, "device": "gpu"}, ValueError, "device"),
    ],
)
def test_default_rotation_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        rope(head_dim=8).default_rotation(**kwargs)
