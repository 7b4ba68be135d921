"""Bad input to the Triton RoPE entries (issue 52): the kernel never writes outside its
tensors, and every bad argument is a ``TypeError`` or ``ValueError`` that names it. These
entries read no value on the host (posenc.functional is pure math); the checks of a
user's offsets and slots are tests/rotary/test_triton_checks.py's. Run under Triton's
interpreter (``TRITON_INTERPRET=1``, tests/conftest.py) on the CPU, or on CUDA tensors
where a GPU is present.
"""

from __future__ import annotations

import pytest
import torch
from tests.test_host_reads import reads

from posenc.functional.rope import apply_rope, rope_cos_sin
from posenc.functional.rope_triton import (
    rope_cache_write,
    rope_triton,
    rope_triton_tables,
    varlen_positions,
)
from posenc.host_reads import validation

pytest.importorskip("triton")
pytestmark = pytest.mark.triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FREQ = 1.0 / 10_000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # head_dim 8


def step(seq: int = 4):
    """q ``[2, 2, seq, 8]``, k and v ``[2, 1, seq, 8]``, and their tables."""
    torch.manual_seed(0)
    q = torch.randn(2, 2, seq, 8, device=DEVICE)
    k, v = torch.randn(2, 1, seq, 8, device=DEVICE), torch.randn(2, 1, seq, 8, device=DEVICE)
    cos, sin = rope_cos_sin(torch.arange(seq, device=DEVICE), FREQ.to(DEVICE))
    return q, k, v, cos, sin


def guarded(slots: int = 4):
    """A ``[2, 1, slots, 8]`` cache that is a view into a larger buffer filled with 7s:
    every byte around it (before, after, between the batch rows) is a guard."""
    buffer = torch.full((2, 1, slots + 8, 8), 7.0, device=DEVICE)
    return buffer, buffer[:, :, 4 : 4 + slots]


def outside(buffer: torch.Tensor, slots: int = 4) -> torch.Tensor:
    return torch.cat([buffer[:, :, :4], buffer[:, :, 4 + slots :]], dim=2)


@pytest.mark.parametrize("checks", [True, False])
@pytest.mark.parametrize("slots", [[-1, 0, 1, 5], [4, 0, 3, 2**40], [-(2**40), 1, 2, 3]])
def test_cache_write_never_writes_outside_the_caches(slots, checks):
    """Slots outside ``[0, 4)`` are written nowhere (the guard bytes stay 7) and the
    slots inside get the rotated keys and the values, as an index_copy of those writes;
    before the kernel masked its stores, these wrote past the cache. The entry reads no
    value, with value checks on or off."""
    q, k, v, cos, sin = step()
    (k_buf, k_cache), (v_buf, v_cache) = guarded(), guarded()
    slots_t = torch.tensor(slots, device=DEVICE)
    out = []

    def write():
        out.append(rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots_t))

    with validation(checks):
        assert reads(write) == []
    q2 = out[0]
    keys = apply_rope(k, cos, sin)
    k_expected, v_expected = torch.full_like(k_cache, 7.0), torch.full_like(v_cache, 7.0)
    inside = [(i, s) for i, s in enumerate(slots) if 0 <= s < 4]
    for i, s in inside:
        k_expected[:, :, s], v_expected[:, :, s] = keys[:, :, i], v[:, :, i]
    torch.testing.assert_close(k_cache, k_expected)
    torch.testing.assert_close(v_cache, v_expected)
    for buffer in (k_buf, v_buf):
        assert torch.equal(outside(buffer), torch.full_like(outside(buffer), 7.0))
    torch.testing.assert_close(q2, apply_rope(q, cos, sin))


def test_more_tokens_than_slots_is_a_shape_error_with_checks_off_too():
    q, k, v, cos, sin = step(5)
    (k_buf, k_cache), (_, v_cache) = guarded(), guarded()
    for on in (True, False):
        with validation(on), pytest.raises(ValueError, match=r"slots: 5 new tokens .* k_cache"):
            rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, torch.arange(5))
    assert torch.equal(k_buf, torch.full_like(k_buf, 7.0))


def test_cache_write_refuses_caches_it_cannot_write():
    """An integer cache (was written, cast), caches of other lengths, one tensor for both,
    an expanded cache (its batch rows one memory)."""
    q, k, v, cos, sin = step()
    cache = torch.zeros(2, 1, 6, 8, device=DEVICE)
    slots = torch.arange(4)
    with pytest.raises(TypeError, match="k_cache must be a floating-point tensor"):
        rope_cache_write(q, k, v, cos, sin, cache.long(), cache.clone(), slots)
    with pytest.raises(TypeError, match="v_cache must be a floating-point tensor"):
        rope_cache_write(q, k, v, cos, sin, cache.clone(), cache.long(), slots)
    with pytest.raises(TypeError, match="k_cache must be float32, bfloat16 or float16"):
        rope_cache_write(q, k, v, cos, sin, cache.double(), cache.clone(), slots)
    with pytest.raises(ValueError, match="k_cache and v_cache must hold as many slots"):
        rope_cache_write(q, k, v, cos, sin, cache.clone(), cache[:, :, :5].clone(), slots)
    with pytest.raises(ValueError, match="k_cache and v_cache must be two tensors"):
        rope_cache_write(q, k, v, cos, sin, cache, cache, slots)
    expanded = torch.zeros(1, 1, 6, 8, device=DEVICE).expand(2, 1, 6, 8)
    with pytest.raises(ValueError, match="k_cache is written in place but its elements share"):
        rope_cache_write(q, k, v, cos, sin, expanded, cache, slots)
    with pytest.raises(ValueError, match="k_cache must be \\[batch=2"):
        rope_cache_write(q, k, v, cos, sin, cache[:1].clone(), cache, slots)


@pytest.mark.parametrize(
    ("slots", "error", "message"),
    [
        ([0, 1, 2, 3], TypeError, "slots must be a torch.Tensor"),
        ("0123", TypeError, "slots must be a torch.Tensor"),
        (torch.arange(4.0), TypeError, "slots must be an integer tensor"),
        (torch.ones(4, dtype=torch.bool), TypeError, "slots must be an integer tensor"),
        (torch.arange(0), ValueError, r"slots must be \[seq = 4\]"),
        (torch.arange(4).view(2, 2), ValueError, "slots must be 1-D"),
        (torch.arange(4, device="meta"), ValueError, "slots is on the meta device"),
    ],
)
def test_cache_write_names_bad_slots(slots, error, message):
    q, k, v, cos, sin = step()
    k_cache, v_cache = torch.zeros(2, 2, 1, 6, 8, device=DEVICE)
    with pytest.raises(error, match=message):
        rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots)
    assert not k_cache.any() and not v_cache.any()


ROPE_ARGS = {
    "q": torch.randn(1, 2, 5, 8, device=DEVICE),
    "k": torch.randn(1, 1, 5, 8, device=DEVICE),
    "positions": torch.arange(5, device=DEVICE),
    "inv_freq": FREQ,
}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"inplace": "no"}, TypeError, "inplace must be a bool"),
        ({"inplace": 1}, TypeError, "inplace must be a bool"),
        ({"inverse": 1}, TypeError, "inverse must be a bool"),
        ({"inverse": None}, TypeError, "inverse must be a bool"),
        ({"attention_factor": True}, TypeError, "attention_factor must be a number"),
        ({"attention_factor": "1.0"}, TypeError, "attention_factor must be a number"),
        ({"attention_factor": torch.tensor(1.0)}, TypeError, "attention_factor must be a num"),
        ({"attention_factor": float("nan")}, ValueError, "attention_factor must be finite"),
        ({"attention_factor": float("inf")}, ValueError, "attention_factor must be finite"),
        ({"attention_factor": 0.0}, ValueError, "attention_factor must be > 0"),
        ({"attention_factor": -1.0}, ValueError, "attention_factor must be > 0"),
        ({"positions": [0, 1, 2, 3, 4]}, TypeError, "positions must be a torch.Tensor"),
        ({"positions": "01234"}, TypeError, "positions must be a torch.Tensor"),
        (
            {"positions": torch.ones(5, dtype=torch.bool)},
            TypeError,
            "positions must be an integer tensor",
        ),
        ({"positions": torch.arange(0)}, ValueError, "positions must be integer"),
        ({"positions": torch.tensor(3)}, ValueError, "positions must be integer"),
        ({"positions": torch.arange(5, device="meta")}, ValueError, "positions is on the meta"),
        ({"inv_freq": FREQ.tolist()}, TypeError, "inv_freq must be a torch.Tensor"),
        ({"inv_freq": "x"}, TypeError, "inv_freq must be a torch.Tensor"),
        ({"inv_freq": torch.ones(4, dtype=torch.long)}, TypeError, "inv_freq must be a float"),
        ({"inv_freq": torch.ones(0)}, ValueError, "inv_freq must turn at least one pair"),
        ({"inv_freq": torch.ones(2, 2)}, ValueError, "inv_freq must be 1-D"),
        ({"inv_freq": FREQ.to("meta")}, ValueError, "inv_freq is on the meta device"),
        ({"rotary_offset": True}, TypeError, "rotary_offset must be an int"),
        ({"rotary_offset": 1.0}, TypeError, "rotary_offset must be an int"),
        ({"rotary_offset": -1}, ValueError, "rotary_offset must be >= 0"),
        ({"rotary_offset": 2**40}, ValueError, "rotary_offset must be <= "),
        ({"rotary_offset": 1}, ValueError, r"rotary_offset must be an int in \[0, head_dim"),
        ({"q": [[1.0]]}, TypeError, "q must be a torch.Tensor"),
        ({"k": None}, TypeError, "k must be a torch.Tensor"),
        ({"k": torch.randn(1, 1, 5, 8, dtype=torch.float64)}, TypeError, "k must be float32"),
        ({"q": torch.randn(1, 2, 5, 8, device="meta")}, ValueError, "q is on the meta device"),
        ({"layout": ["half"]}, ValueError, "layout must be 'half' or 'interleaved'"),
    ],
)
def test_rope_triton_names_bad_arguments(kwargs, error, message):
    """Each of these was accepted (``inplace="no"`` rotated in place, ``inverse=1`` and
    ``attention_factor=True`` turned) or failed inside torch or Triton."""
    with pytest.raises(error, match=message):
        rope_triton(**(ROPE_ARGS | kwargs))


def test_in_place_into_an_expanded_tensor_is_refused():
    q = torch.randn(1, 2, 5, 8, device=DEVICE).expand(3, 2, 5, 8)
    k = torch.randn(3, 1, 5, 8, device=DEVICE)
    with pytest.raises(ValueError, match="q is written in place but its elements share"):
        rope_triton(q, k, torch.arange(5), FREQ, inplace=True)
    cos, sin = rope_cos_sin(torch.arange(5), FREQ)
    with pytest.raises(ValueError, match="q is written in place"):
        rope_triton_tables(q, None, cos, sin, inplace=True)


@pytest.mark.parametrize(
    ("tables", "error", "message"),
    [
        (("cos", "sin"), TypeError, "cos must be a torch.Tensor"),
        (([[1.0]], [[0.0]]), TypeError, "cos must be a torch.Tensor"),
        ((torch.ones(5, 4), [[0.0]]), TypeError, "sin must be a torch.Tensor"),
        ((torch.ones(5, 4), torch.ones(5)), ValueError, "cos and sin must be float32 \\[seq"),
        ((torch.ones(5, 4), torch.ones(5, 3)), ValueError, "cos and sin must be float32 \\[seq"),
        ((torch.ones(5, 0), torch.ones(5, 0)), ValueError, "cos and sin must turn at least"),
        ((torch.ones(5, 4).double(), torch.ones(5, 4)), TypeError, "cos and sin must be float32"),
        ((torch.ones(5, 4, device="meta"),) * 2, ValueError, "cos is on the meta device"),
    ],
)
def test_tables_are_named(tables, error, message):
    q = torch.randn(1, 2, 5, 8, device=DEVICE)
    with pytest.raises(error, match=message):
        rope_triton_tables(q, None, *tables)
    k, v = torch.randn(1, 1, 5, 8, device=DEVICE), torch.randn(1, 1, 5, 8, device=DEVICE)
    caches = torch.zeros(2, 1, 1, 6, 8, device=DEVICE)
    with pytest.raises(error, match=message):
        rope_cache_write(q, k, v, *tables, *caches, torch.arange(5))


def test_tables_of_two_layouts_are_read_each_by_its_own():
    """A ``sin`` laid out otherwise than ``cos`` (a transposed view): the kernel read both
    by ``cos``'s strides (sin's values from the wrong places, or past its end)."""
    q = torch.randn(1, 2, 5, 8, device=DEVICE)
    cos, sin = rope_cos_sin(torch.arange(5, device=DEVICE) + 3, FREQ.to(DEVICE))
    sin_t = sin.t().contiguous().t()  # the same values, strides (1, 5)
    assert sin_t.stride() != cos.stride()
    got, _ = rope_triton_tables(q, None, cos, sin_t)
    torch.testing.assert_close(got, apply_rope(q, cos, sin))


def test_empty_sequences_turn_to_empty_results():
    q, k = torch.randn(2, 2, 0, 8, device=DEVICE), torch.randn(2, 1, 0, 8, device=DEVICE)
    q2, k2 = rope_triton(q, k, torch.arange(0), FREQ)
    assert q2.shape == q.shape and k2.shape == k.shape


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU is refused without a GPU")
def test_the_cpu_without_the_interpreter_is_named(monkeypatch):
    """Triton said "0 active drivers"; the entries now say what runs where, as the
    ``kernel="triton"`` encodings do."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v, cos, sin = step()
    with pytest.raises(ValueError, match=r"rope_triton rotates CUDA tensors .* got q on cpu"):
        rope_triton(q, k, torch.arange(4), FREQ)
    with pytest.raises(ValueError, match="rope_triton_tables rotates CUDA tensors"):
        rope_triton_tables(q, k, cos, sin)
    caches = torch.zeros(2, 1, 4, 8), torch.zeros(2, 1, 4, 8)
    with pytest.raises(ValueError, match="rope_cache_write rotates CUDA tensors"):
        rope_cache_write(q, k, v, cos, sin, *caches, torch.arange(4))
    with pytest.raises(ValueError, match="rope_triton rotates CUDA tensors"):
        rope_triton(q[0].transpose(0, 1), k[0].transpose(0, 1), None, FREQ,
                    cu_seqlens=torch.tensor([0, 4]))  # fmt: skip


@pytest.mark.parametrize(
    ("cu_seqlens", "total", "error", "message"),
    [
        (torch.tensor([False, True]), 1, TypeError, "cu_seqlens must be an integer tensor"),
        (torch.tensor([0.0, 3.0]), 3, TypeError, "cu_seqlens must be an integer tensor"),
        ([0, 3], 3, TypeError, "cu_seqlens must be a torch.Tensor"),
        (torch.tensor([0]), 0, ValueError, r"cu_seqlens must be \[n \+ 1\]"),
        (torch.tensor([[0, 3]]), 3, ValueError, "cu_seqlens must be 1-D"),
        (torch.tensor([0, 3]), 3.0, TypeError, "total must be an int"),
        (torch.tensor([0, 1]), True, TypeError, "total must be an int"),
        (torch.tensor([0, 3]), None, TypeError, "total must be an int"),
        (torch.tensor([0, 3]), -1, ValueError, "total must be >= 0"),
        (torch.tensor([0, 3]), 2**62, ValueError, "total must be <= "),
    ],
)
def test_varlen_positions_names_bad_offsets(cu_seqlens, total, error, message):
    """Each of these was accepted or failed inside torch (offsets out of order are values:
    tests/rotary/test_triton_checks.py)."""
    with pytest.raises(error, match=message):
        varlen_positions(cu_seqlens, total)


def test_cu_seqlens_of_rope_triton_are_checked_the_same_way():
    q, k = torch.randn(6, 2, 8, device=DEVICE), torch.randn(6, 1, 8, device=DEVICE)
    with pytest.raises(TypeError, match="cu_seqlens must be an integer tensor"):
        rope_triton(q, k, None, FREQ, cu_seqlens=torch.tensor([False, True]))
    with pytest.raises(ValueError, match="with the same total and head_dim"):
        rope_triton(q, k[:5], None, FREQ, cu_seqlens=torch.tensor([0, 6]))


@pytest.mark.parametrize("checks", [True, False])
def test_the_offsets_values_are_not_read_but_their_shapes_are_checked(checks):
    """With value checks on or off, the offsets' values are not read (the result is what
    the formula gives: ``[0, 3, 4]`` with total 6), while a bool tensor or a float total
    is refused."""
    with validation(checks):
        out = []
        assert reads(lambda: out.append(varlen_positions(torch.tensor([0, 3, 4]), 6))) == []
        assert out[0].tolist() == [0, 1, 2, 0, 1, 2]
        with pytest.raises(TypeError, match="cu_seqlens must be an integer tensor"):
            varlen_positions(torch.tensor([False, True]), 1)
        with pytest.raises(TypeError, match="total must be an int"):
            varlen_positions(torch.tensor([0, 3]), 3.0)
