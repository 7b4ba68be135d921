"""The Triton RoPE entries with their value checks (posenc.rotary.triton_checks): a user's
offsets and slots are read once and refused by name, before anything is rotated or
written; none is read with value checks off. The kernel's own entries read nothing
(tests/functional/test_rope_triton_bad_input.py). Under Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, tests/conftest.py), on CUDA tensors where a GPU is present.
"""

from __future__ import annotations

import pytest
import torch
from tests.test_host_reads import reads

from posenc.functional import rope_triton as kernel
from posenc.functional.rope import apply_rope, rope_cos_sin
from posenc.host_reads import validation
from posenc.rotary.triton_checks import (
    check_cu_seqlens_values,
    check_slot_values,
    rope_cache_write,
    rope_triton,
    varlen_positions,
)

pytest.importorskip("triton")
pytestmark = pytest.mark.triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FREQ = 1.0 / 10_000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # head_dim 8


def step(seq: int = 4):
    """q ``[2, 2, seq, 8]``, k and v ``[2, 1, seq, 8]``, their tables, and two caches of
    4 slots filled with 7s."""
    torch.manual_seed(0)
    q = torch.randn(2, 2, seq, 8, device=DEVICE)
    k, v = torch.randn(2, 1, seq, 8, device=DEVICE), torch.randn(2, 1, seq, 8, device=DEVICE)
    cos, sin = rope_cos_sin(torch.arange(seq, device=DEVICE), FREQ.to(DEVICE))
    caches = [torch.full((2, 1, 4, 8), 7.0, device=DEVICE) for _ in range(2)]
    return q, k, v, cos, sin, *caches


@pytest.mark.parametrize("slots", [[-1, 0, 1, 2], [1, 2, 3, 4], [-(2**40), 0, 1, 2]])
def test_bad_slots_are_refused_before_any_write(slots):
    """A slot outside the cache is a ValueError naming ``slots``, and the caches are as
    they were (nothing written, in range or not)."""
    q, k, v, cos, sin, k_cache, v_cache = step()
    with pytest.raises(ValueError, match=r"slots must be rows of k_cache and v_cache, in \[0, 3\]"):
        rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, torch.tensor(slots, device=DEVICE))
    assert torch.equal(k_cache, torch.full_like(k_cache, 7.0))
    assert torch.equal(v_cache, torch.full_like(v_cache, 7.0))


def test_good_slots_write_what_the_kernel_writes_after_one_read():
    q, k, v, cos, sin, k_cache, v_cache = step()
    slots = torch.tensor([3, 0, 2, 1], device=DEVICE)
    out = []

    def write():
        out.append(rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots))

    assert len(reads(write)) == 1
    expected_k, expected_v = torch.full_like(k_cache, 7.0), torch.full_like(v_cache, 7.0)
    expected_q = kernel.rope_cache_write(q, k, v, cos, sin, expected_k, expected_v, slots)
    assert torch.equal(out[0], expected_q)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    torch.testing.assert_close(k_cache[:, :, 3], apply_rope(k, cos, sin)[:, :, 0])


def test_shapes_are_checked_before_the_slots_are_read():
    """A bad argument elsewhere is named as the kernel's entry names it (no read of slots
    that may not be a tensor at all)."""
    q, k, v, cos, sin, k_cache, v_cache = step()
    with pytest.raises(TypeError, match=r"slots must be a torch\.Tensor"):
        rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="k_cache and v_cache must hold as many slots"):
        rope_cache_write(q, k, v, cos, sin, k_cache, v_cache[:, :, :3], torch.arange(4))
    with pytest.raises(TypeError, match="rows must be an int"):
        check_slot_values(torch.arange(4), 4.0)


def test_value_checks_off_read_nothing_and_the_kernel_masks():
    q, k, v, cos, sin, k_cache, v_cache = step()
    slots = torch.tensor([-1, 0, 1, 9], device=DEVICE)

    def write():
        rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots)

    with validation(False):
        assert reads(write) == []
    assert torch.equal(k_cache[:, :, 2:], torch.full_like(k_cache[:, :, 2:], 7.0))
    torch.testing.assert_close(v_cache[:, :, :2], v[:, :, 1:3])


@pytest.mark.parametrize(
    ("cu_seqlens", "total", "error", "message"),
    [
        (torch.tensor([1, 3, 6]), 6, ValueError, "cu_seqlens must run 0 = c_0"),
        (torch.tensor([0, 4, 3, 6]), 6, ValueError, "cu_seqlens must run .* decreasing"),
        (torch.tensor([0, -2, 6]), 6, ValueError, "cu_seqlens must run .* decreasing"),
        (torch.tensor([0, 3, 4]), 6, ValueError, "cu_seqlens must run .* c_n = 4"),
        (torch.tensor([0, 3, 7]), 6, ValueError, "cu_seqlens must run .* c_n = 7"),
        (torch.tensor([False, True]), 1, TypeError, "cu_seqlens must be an integer tensor"),
        ([0, 3], 3, TypeError, "cu_seqlens must be a torch.Tensor"),
        (torch.tensor([0]), 0, ValueError, r"cu_seqlens must be \[n \+ 1\]"),
        (torch.tensor([0, 3]), 3.0, TypeError, "total must be an int"),
        (torch.tensor([0, 3]), -1, ValueError, "total must be >= 0"),
    ],
)
def test_varlen_positions_names_bad_offsets(cu_seqlens, total, error, message):
    """``[0, 3, 4]`` with total 6 gave ``[0, 1, 2, 0, 1, 2]``; each of these was accepted
    or failed inside torch."""
    with pytest.raises(error, match=message):
        varlen_positions(cu_seqlens, total)
    with pytest.raises(error, match=message):
        check_cu_seqlens_values(cu_seqlens, total)


def test_good_offsets_are_read_once_and_give_the_kernels_positions():
    cu = torch.tensor([0, 3, 5, 5, 8])
    out = []
    assert len(reads(lambda: out.append(varlen_positions(cu, 8)))) == 1
    assert torch.equal(out[0], kernel.varlen_positions(cu, 8))
    with validation(False):
        assert reads(lambda: varlen_positions(torch.tensor([0, 3, 4]), 6)) == []


def test_rope_triton_checks_the_offsets_before_rotating_in_place():
    q, k = torch.randn(6, 2, 8, device=DEVICE), torch.randn(6, 1, 8, device=DEVICE)
    q0, k0 = q.clone(), k.clone()
    with pytest.raises(ValueError, match=r"cu_seqlens must run .* c_n = 4"):
        rope_triton(q, k, None, FREQ, inplace=True, cu_seqlens=torch.tensor([0, 3, 4]))
    assert torch.equal(q, q0) and torch.equal(k, k0)
    with pytest.raises(ValueError, match="with the same total and head_dim"):
        rope_triton(q, k[:5], None, FREQ, cu_seqlens=torch.tensor([0, 6]))
    cu = torch.tensor([0, 2, 6], device=DEVICE)
    got = rope_triton(q, k, None, FREQ, cu_seqlens=cu)
    expected = kernel.rope_triton(q, k, None, FREQ, cu_seqlens=cu)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    positions = torch.arange(6, device=DEVICE)  # no offsets: nothing read
    assert reads(lambda: rope_triton(q[None].transpose(1, 2), k[None].transpose(1, 2),
                                     positions, FREQ)) == []  # fmt: skip
