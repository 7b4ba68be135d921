"""The Triton RoPE kernel against posenc's torch path and transformers' rotation, on the
CPU under Triton's interpreter (``TRITON_INTERPRET=1``; on a machine with a GPU the same
tests run the compiled kernel on CUDA tensors).

Tolerances: both sides compute the same cos and sin (float64 angles reduced mod 2π,
rounded once to float32) and turn a pair in float32, in another order of roundings; a
result of size ``|x1·c| + |x2·s|`` is then a few float32 ulps apart before it is rounded
to the input's dtype, where the two may land one ulp of that dtype apart. Triton's
interpreter also rounds float32 to bfloat16 toward zero (a GPU rounds to nearest even,
as torch does): one ulp of bfloat16 again.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.functional.rope import apply_rope, rope_cos_sin
from posenc.functional.rope_triton import (
    rope_cache_write,
    rope_triton,
    rope_triton_tables,
    varlen_positions,
)

pytest.importorskip("triton")  # under its interpreter without a GPU (tests/conftest.py)
pytestmark = pytest.mark.triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
#: ulps of each dtype (its eps) that two roundings of the same float32 value may differ by
ROUNDING = {torch.float32: 8 * 2**-23, torch.bfloat16: 2**-7, torch.float16: 2**-10}


def inv_freq(rotary_dim: int, base: float = 10_000.0) -> torch.Tensor:
    return 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def reference(x, positions, freq, factor, layout):
    cos, sin = rope_cos_sin(positions, freq, factor)
    return apply_rope(x, cos, sin, layout)


def close(got, expected, x, factor=1.0):
    """Equal within the roundings above, relative to the largest rotated value."""
    scale = 2 * factor * x.float().abs().amax().item()
    eps = ROUNDING[got.dtype]
    assert_close(got, expected, atol=eps * scale, rtol=eps)


def qk(batch, heads, kv_heads, seq, head_dim, dtype=torch.float32):
    torch.manual_seed(0)
    q = torch.randn(batch, heads, seq, head_dim, device=DEVICE).to(dtype)
    k = torch.randn(batch, kv_heads, seq, head_dim, device=DEVICE).to(dtype)
    return q, k


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(64, 64), (80, 80), (128, 64), (256, 256)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_equals_the_torch_path(layout, head_dim, rotary_dim, dtype):
    """Grouped keys (4 query heads, 2 key heads), an odd length, partial rotary (the
    channels past ``rotary_dim`` copied through), YaRN's attention factor, every dtype."""
    q, k = qk(2, 4, 2, 13, head_dim, dtype)
    positions, freq = torch.arange(13, device=DEVICE) + 1000, inv_freq(rotary_dim)
    q2, k2 = rope_triton(q, k, positions, freq, 1.2, layout)
    assert q2.dtype == dtype and k2.shape == k.shape
    close(q2, reference(q, positions, freq, 1.2, layout), q, 1.2)
    close(k2, reference(k, positions, freq, 1.2, layout), k, 1.2)
    assert torch.equal(q2[..., rotary_dim:], q[..., rotary_dim:])


def test_per_row_positions_and_strided_inputs():
    """Positions per row (left padding, a cache offset) and q, k as views of a fused
    projection ``[batch, seq, heads, head_dim]`` transposed: no copy needed."""
    fused = torch.randn(2, 9, 6, 32, device=DEVICE)
    q, k = fused[:, :, :4].transpose(1, 2), fused[:, :, 4:].transpose(1, 2)
    positions = torch.stack([torch.arange(9), torch.arange(9) + 37]).to(DEVICE)
    positions[0, :3] = 0  # pads
    freq = inv_freq(32)
    q2, k2 = rope_triton(q, k, positions, freq, 1.0, "half")
    close(q2, reference(q, positions, freq, 1.0, "half"), q)
    close(k2, reference(k, positions, freq, 1.0, "half"), k)


def test_in_place_writes_into_q_and_k():
    q, k = qk(1, 2, 1, 5, 16)
    expected = reference(q, torch.arange(5, device=DEVICE), inv_freq(16), 1.0, "interleaved")
    q2, _ = rope_triton(
        q, k, torch.arange(5, device=DEVICE), inv_freq(16), 1.0, "interleaved", True
    )
    assert q2.data_ptr() == q.data_ptr()
    close(q, expected, q)


def test_long_positions_keep_their_phase():
    """At position 10^7 a float32 angle is off by up to 0.5 rad; the kernel's float64 ones
    give the torch path's rotation."""
    q, k = qk(1, 1, 1, 3, 16)
    positions = torch.tensor([10**7, 10**7 + 1, 10**7 + 2], device=DEVICE)
    q2, _ = rope_triton(q, k, positions, inv_freq(16), 1.0, "half")
    close(q2, reference(q, positions, inv_freq(16), 1.0, "half"), q)


def test_gradients_equal_autograd_of_the_torch_path():
    """The backward turns the gradients by the opposite angle: equal to autograd through
    :func:`apply_rope`, partial rotary and grouped keys included."""
    q, k = qk(2, 4, 2, 7, 48)
    positions, freq = torch.arange(7, device=DEVICE) + 3, inv_freq(32)
    grads = torch.randn_like(q), torch.randn_like(k)
    leaves = [t.clone().requires_grad_() for t in (q, k)]
    out = rope_triton(*leaves, positions, freq, 1.1, "half")
    torch.autograd.backward(out, grads)
    refs = [t.clone().requires_grad_() for t in (q, k)]
    torch.autograd.backward([reference(t, positions, freq, 1.1, "half") for t in refs], grads)
    for got, expected, g in zip(leaves, refs, grads, strict=True):
        close(got.grad, expected.grad, g, 1.1)


def test_equals_transformers_rotation():
    """transformers' ``apply_rotary_pos_emb`` (Llama's, the half layout) with the same
    cos and sin, repeated over both halves as transformers builds them."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k = qk(1, 4, 2, 11, 64)
    positions, freq = torch.arange(11, device=DEVICE), inv_freq(64)
    cos, sin = rope_cos_sin(positions, freq)
    cos, sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    q_hf, k_hf = llama.apply_rotary_pos_emb(q, k, cos, sin)
    q2, k2 = rope_triton(q, k, positions, freq, 1.0, "half")
    close(q2, q_hf, q)
    close(k2, k_hf, k)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"layout": "zigzag"}, ValueError, "layout must be"),
        ({"k": torch.randn(1, 1, 4, 8)}, ValueError, "same batch, seq and head_dim"),
        ({"inv_freq": torch.ones(8)}, ValueError, "rotary_dim <= head_dim"),
        ({"positions": torch.arange(5.0)}, TypeError, "positions must be an integer tensor"),
        ({"positions": torch.arange(10).view(2, 5)}, ValueError, "positions must be integer"),
    ],
)
def test_bad_input_is_named(kwargs, error, message):
    args = {
        "q": torch.randn(1, 2, 5, 8),
        "k": torch.randn(1, 1, 5, 8),
        "positions": torch.arange(5),
        "inv_freq": torch.ones(4),
    } | kwargs
    with pytest.raises(error, match=message):
        rope_triton(**args)


def test_tables_equal_the_torch_path_with_one_tensor_or_two():
    """``rope_triton_tables``: an encoding's float32 tables, shared ``[seq, n]`` or per row
    ``[batch, seq, n]``; ``k`` may be None (one tensor)."""
    q, k = qk(2, 4, 2, 9, 40)
    positions = torch.stack([torch.arange(9), torch.arange(9) * 3 + 5]).to(DEVICE)
    for pos in (positions[1], positions):
        cos, sin = rope_cos_sin(pos, inv_freq(32), 1.3)
        q2, k2 = rope_triton_tables(q, k, cos, sin, "interleaved")
        close(q2, apply_rope(q, cos, sin, "interleaved"), q, 1.3)
        close(k2, apply_rope(k, cos, sin, "interleaved"), k, 1.3)
        alone, none = rope_triton_tables(q, None, cos, sin, "interleaved")
        assert none is None and torch.equal(alone, q2)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotary_channels_at_an_offset(layout):
    """``rotary_offset``: the pairs sit at channels ``[offset, offset + rotary_dim)``
    (DeepSeek-V4 rotates the last ones); the channels before and after pass unchanged."""
    q, k = qk(1, 2, 1, 6, 48)
    positions, freq = torch.arange(6, device=DEVICE) + 11, inv_freq(16)
    for offset in (32, 8):
        q2, k2 = rope_triton(q, k, positions, freq, 1.0, layout, rotary_offset=offset)
        for got, x in ((q2, q), (k2, k)):
            part = x[..., offset : offset + 16]
            close(got[..., offset : offset + 16], reference(part, positions, freq, 1.0, layout), x)
            assert torch.equal(got[..., :offset], x[..., :offset])
            assert torch.equal(got[..., offset + 16 :], x[..., offset + 16 :])


def test_inverse_undoes_the_rotation():
    """``inverse=True`` turns by the opposite angles: the torch path with ``-sin``, and
    the forward rotation undone (DeepSeek-V4 turns the attention output back)."""
    q, k = qk(2, 2, 2, 7, 32)
    positions, freq = torch.arange(7, device=DEVICE) * 100, inv_freq(32)
    q2, _ = rope_triton(q, k, positions, freq, inverse=True)
    cos, sin = rope_cos_sin(positions, freq)
    close(q2, apply_rope(q, cos, -sin), q)
    back, _ = rope_triton(*rope_triton(q, k, positions, freq), positions, freq, inverse=True)
    close(back, q, q)


def test_packed_sequences_by_cu_seqlens():
    """flash-attention's varlen layout ``[total, heads, head_dim]``: each sequence turns
    from position 0, as if it were rotated alone."""
    cu = torch.tensor([0, 3, 3, 8, 11], device=DEVICE)  # an empty sequence too
    torch.manual_seed(1)
    q = torch.randn(11, 4, 16, device=DEVICE)
    k = torch.randn(11, 2, 16, device=DEVICE)
    q2, k2 = rope_triton(q, k, None, inv_freq(16), cu_seqlens=cu)
    for start, end in ((0, 3), (3, 8), (8, 11)):
        alone = torch.arange(end - start, device=DEVICE)
        expected = reference(q[start:end].transpose(0, 1)[None], alone, inv_freq(16), 1.0, "half")
        close(q2[start:end], expected[0].transpose(0, 1), q)
    assert k2.shape == k.shape
    assert varlen_positions(cu, 11).tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2]


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
def test_cache_write_equals_rotate_then_index_copy(cache_dtype):
    """``rope_cache_write``: q rotated, the rotated keys and the values written at their
    slots of the caches (in the caches' dtype), the other slots untouched."""
    q, k = qk(2, 4, 2, 3, 24)
    v = torch.randn_like(k)
    slots = torch.tensor([5, 6, 7], device=DEVICE)
    cos, sin = rope_cos_sin(slots, inv_freq(16))
    k_cache = torch.full((2, 2, 10, 24), 7.0, dtype=cache_dtype, device=DEVICE)
    v_cache = k_cache.clone()
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    k_expected.index_copy_(2, slots, apply_rope(k, cos, sin).to(cache_dtype))
    v_expected.index_copy_(2, slots, v.to(cache_dtype))
    q2 = rope_cache_write(q, k, v, cos, sin, k_cache, v_cache, slots)
    close(q2, apply_rope(q, cos, sin), q)
    close(k_cache, k_expected, k)
    close(v_cache, v_expected, v)  # the interpreter's bfloat16 truncates (see the top)
    assert torch.equal(k_cache[:, :, :5], torch.full_like(k_cache[:, :, :5], 7.0))


def test_equals_transformers_deepseek_interleaved_rotation():
    """DeepSeek's ``apply_rotary_pos_emb_interleave`` turns interleaved pairs and returns
    them de-interleaved (the even channels' results, then the odd ones'): the kernel's
    interleaved result in that order."""
    ds = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
    q, k = qk(1, 2, 1, 10, 32)
    positions, freq = torch.arange(10, device=DEVICE), inv_freq(32)
    cos, sin = rope_cos_sin(positions, freq)
    cos, sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    q_hf, k_hf = ds.apply_rotary_pos_emb_interleave(q, k, cos, sin)
    q2, k2 = rope_triton(q, k, positions, freq, 1.0, "interleaved")
    for got, expected, x in ((q2, q_hf, q), (k2, k_hf, k)):
        close(torch.cat([got[..., 0::2], got[..., 1::2]], -1), expected, x)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_equals_liger_kernel(head_dim):
    """Liger-Kernel's ``LigerRopeFunction`` (its Triton kernel, run by the same
    interpreter): the half layout and the whole head, as it supports; its cos and sin are
    transformers' ``[1, seq, head_dim]``, and its backward is checked too."""
    liger = pytest.importorskip("liger_kernel.ops.rope")
    q, k = qk(2, 4, 2, 13, head_dim)
    positions, freq = torch.arange(13, device=DEVICE) + 40, inv_freq(head_dim)
    cos, sin = rope_cos_sin(positions, freq)
    cos2, sin2 = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    leaves = [t.clone().requires_grad_() for t in (q, k)]
    theirs = [t.clone().requires_grad_() for t in (q, k)]
    ours = rope_triton(*leaves, positions, freq)
    q_lg, k_lg = liger.LigerRopeFunction.apply(*(t * 1 for t in theirs), cos2, sin2)
    close(ours[0], q_lg, q)
    close(ours[1], k_lg, k)
    grads = torch.randn_like(q), torch.randn_like(k)
    torch.autograd.backward(ours, grads)
    torch.autograd.backward((q_lg, k_lg), grads)
    for mine, other, g in zip(leaves, theirs, grads, strict=True):
        close(mine.grad, other.grad, g)


def test_float64_and_tables_with_a_gradient_are_refused():
    q, k = qk(1, 1, 1, 4, 8)
    with pytest.raises(TypeError, match="q must be float32, bfloat16 or float16"):
        rope_triton(q.double(), k, torch.arange(4), inv_freq(8))
    cos, sin = rope_cos_sin(torch.arange(4), inv_freq(8))
    with pytest.raises(ValueError, match="must not need a gradient"):
        rope_triton_tables(q, k, cos.requires_grad_(), sin)
    with pytest.raises(TypeError, match="cos and sin must be float32"):
        rope_triton_tables(q, k, cos.detach().double(), sin.double())
    with pytest.raises(ValueError, match="rotary_offset must be an int in"):
        rope_triton(q, k, torch.arange(4), inv_freq(4), rotary_offset=6)
    with pytest.raises(TypeError, match="cu_seqlens must be an integer tensor"):
        varlen_positions(torch.tensor([0.0, 3.0]), 3)
