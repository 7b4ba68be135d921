"""The Triton RoPE kernel against posenc's torch path and transformers' rotation, on the
CPU under Triton's interpreter (``TRITON_INTERPRET=1``; on a machine with a GPU the same
tests run the compiled kernel on CUDA tensors).

Tolerances: both sides compute the same cos and sin (float64 angles reduced mod 2π,
rounded once to float32) and turn a pair in float32, in another order of roundings; a
result of size ``|x1·c| + |x2·s|`` is then a few float32 ulps apart before it is rounded
to the input's dtype, where the two may land one ulp of that dtype apart.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.testing import assert_close

if not torch.cuda.is_available():  # before Triton is imported: its interpreter, on the CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

from posenc.functional.rope import apply_rope, rope_cos_sin
from posenc.functional.rope_triton import rope_triton

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
    ("kwargs", "message"),
    [
        ({"layout": "zigzag"}, "layout must be"),
        ({"k": torch.randn(1, 1, 4, 8)}, "same batch, seq and head_dim"),
        ({"inv_freq": torch.ones(8)}, "rotary_dim <= head_dim"),
        ({"positions": torch.arange(5.0)}, "positions must be integer"),
        ({"positions": torch.arange(10).view(2, 5)}, "positions must be integer"),  # 2 rows
    ],
)
def test_bad_input_is_named(kwargs, message):
    args = {
        "q": torch.randn(1, 2, 5, 8),
        "k": torch.randn(1, 1, 5, 8),
        "positions": torch.arange(5),
        "inv_freq": torch.ones(4),
    } | kwargs
    with pytest.raises(ValueError, match=message):
        rope_triton(**args)
