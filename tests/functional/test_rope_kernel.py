"""The fast RoPE kernel (posenc.functional.rope_kernel) computes what the reference does.

The compiled path is forced on tiny shapes (threshold 0). Compiles are slow, so the cases
share graphs: one graph per (layout, cos/sin rank, dtype, autograd mode, partial rotary);
sizes, strides and head counts are symbolic (``dynamic=True``).
"""

import subprocess
import sys
import warnings

import pytest
import torch

import posenc
from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq
from posenc.functional import compiled as compiled_mod
from posenc.functional import rope_kernel as rk
from posenc.functional.cpu import cpu_vector_isa
from posenc.functional.rope_kernel import apply_rope_fast

pytestmark = pytest.mark.skipif(
    not cpu_vector_isa(), reason="inductor has no vector ISA on this CPU: eager only"
)


@pytest.fixture
def compiled(monkeypatch):
    """Force the compiled kernel on every size; the list counts the calls it answers."""
    calls = []
    real = rk.KERNEL.compiled

    def counting(x, *args):
        calls.append(tuple(x.shape))
        return real(x, *args)

    monkeypatch.setattr(compiled_mod, "ENABLED", True)
    monkeypatch.setattr(rk, "COMPILE_MIN_NUMEL", 0)
    monkeypatch.setattr(rk.KERNEL, "failed", None)
    monkeypatch.setattr(rk.KERNEL, "compiled", counting)
    return calls


def tables(seq, n, batch=None, heads=None, dtype=torch.float32):
    """cos/sin of RoPE angles: ``[seq, n]``, ``[batch, seq, n]`` (positions per row) or
    ``[batch, heads, seq, n]`` (another base per head)."""
    if heads is not None:
        bases = 100.0 * 10 ** torch.arange(heads)
        cs = [rope_cos_sin(torch.arange(seq), rope_inv_freq(2 * n, float(b))[0]) for b in bases]
        cos, sin = (
            torch.stack(t).unsqueeze(0).expand(batch, -1, -1, -1) for t in zip(*cs, strict=True)
        )
        return cos.to(dtype), sin.to(dtype)
    positions = torch.arange(seq) if batch is None else torch.randint(0, 5000, (batch, seq))
    cos, sin = rope_cos_sin(positions, rope_inv_freq(2 * n)[0])
    return cos.to(dtype), sin.to(dtype)


def projected(batch, heads, seq, head_dim, dtype=torch.float32):
    """q as a projection gives it: ``[batch, seq, heads·head_dim]`` viewed as heads and
    transposed, so non-contiguous."""
    x = torch.randn(batch, seq, heads * head_dim, dtype=dtype)
    return x.view(batch, seq, heads, head_dim).transpose(1, 2)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_forward_equals_reference(compiled, layout):
    # float32: the same operations in the same order, fused (inductor does not contract
    # a·b - c·d into an FMA by default): equal, bit for bit
    cos, sin = tables(37, 8)  # odd length; partial rotary: test_backward_equals_reference
    q = projected(2, 4, 37, 16)  # non-contiguous
    k = projected(2, 2, 37, 16)  # grouped-query: fewer key heads
    assert not q.is_contiguous()
    for x in (q, k, q.contiguous()):
        assert torch.equal(apply_rope_fast(x, cos, sin, layout), apply_rope(x, cos, sin, layout))
    assert len(compiled) == 3
    out = apply_rope_fast(q, cos, sin, layout)
    assert out.shape == q.shape and out.dtype == q.dtype


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backward_equals_reference(compiled, layout):
    # partial rotary, forward and backward. The backward is the rotation by -θ:
    # g1·cos + g2·sin and g2·cos - g1·sin, each product rounded, then a two-term sum
    # (order-free), as the reference's autograd computes them
    cos, sin = tables(37, 5)  # partial rotary
    x = projected(2, 3, 37, 16).requires_grad_()
    grad = projected(2, 3, 37, 16)
    fast, ref = apply_rope_fast(x, cos, sin, layout), apply_rope(x, cos, sin, layout)
    assert torch.equal(fast, ref)
    (fast,) = torch.autograd.grad(fast, x, grad)
    (ref,) = torch.autograd.grad(ref, x, grad)
    assert len(compiled) == 2  # forward, and backward as a rotation
    assert torch.equal(fast, ref)


def test_double_backward_and_table_gradients(compiled, tol):
    # create_graph=True through the rotation (AOTAutograd alone has no double backward),
    # and cos/sin that need a gradient (learned frequencies) take the compiled function's
    # own backward
    cos, sin = tables(9, 8)
    x = torch.randn(1, 2, 9, 16, requires_grad=True)
    grads = []
    for fn in (apply_rope_fast, apply_rope):
        (g,) = torch.autograd.grad(fn(x, cos, sin).pow(3).sum(), x, create_graph=True)
        grads.append(torch.autograd.grad(g.sum(), x)[0])
    torch.testing.assert_close(grads[0], grads[1], **tol(n=4, scale=grads[1].abs().max().item()))
    cos, sin = cos.clone().requires_grad_(), sin.clone().requires_grad_()
    fast = torch.autograd.grad(apply_rope_fast(x, cos, sin).square().sum(), (x, cos, sin))
    ref = torch.autograd.grad(apply_rope(x, cos, sin).square().sum(), (x, cos, sin))
    for a, b in zip(fast, ref, strict=True):
        # a table's gradient sums 2 y·x products over 2 heads (|y| <= 2 max|x|): 4 terms of
        # at most 4 max|x|², a few roundings each
        torch.testing.assert_close(a, b, **tol(n=8, scale=16 * x.abs().max().item() ** 2))


def within_one_ulp(a, b):
    """Each element of ``a`` equal to ``b``'s or one unit in the last place of ``b``'s dtype
    away (``eps·|b|`` bounds the spacing at ``|b|``; ``eps·tiny`` below the normal range)."""
    info = torch.finfo(b.dtype)
    ulp = info.eps * b.float().abs().clamp_min(info.tiny)
    return bool(((a.float() - b.float()).abs() <= ulp).all())


#: each case compiles its own graphs (about 4 s on a cold cache): each dtype and each layout
#: once in the default suite, every pair in ``make test-slow``
LOW_PRECISION = [
    (torch.bfloat16, "half"),
    (torch.float16, "interleaved"),
    pytest.param(torch.bfloat16, "interleaved", marks=pytest.mark.slow),
    pytest.param(torch.float16, "half", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("dtype", "layout"), LOW_PRECISION)
def test_low_precision_within_one_ulp(compiled, layout, dtype):
    # both compute in float32 and round once to dtype; the float32 values are equal (see
    # above), so the results are equal unless inductor keeps a value the reference rounds:
    # then one ulp at most (round-to-nearest of values one float32 ulp apart lands on the
    # same or a neighbouring value of dtype). Odd length, odd head_dim, partial rotary (14
    # of 19 dimensions), non-contiguous; forward and backward
    cos, sin = tables(37, 7)
    x = projected(2, 3, 37, 19, dtype=dtype)
    x.requires_grad_()
    fast, ref = apply_rope_fast(x, cos, sin, layout), apply_rope(x, cos, sin, layout)
    grad = torch.randn_like(ref)
    grads = [torch.autograd.grad(y, x, grad)[0] for y in (fast, ref)]
    assert fast.dtype == grads[0].dtype == dtype and len(compiled) == 2
    assert torch.equal(fast[..., 14:], x[..., 14:])  # the rest passes through, unrounded
    for a, b in ((fast, ref), tuple(grads)):
        assert within_one_ulp(a, b)


@pytest.mark.parametrize("layout", ["half", pytest.param("interleaved", marks=pytest.mark.slow)])
def test_batch_and_per_head_tables(compiled, layout):
    x = projected(2, 3, 21, 16)
    for cos, sin in (tables(21, 8, batch=2), tables(21, 8, batch=2, heads=3)):
        assert torch.equal(apply_rope_fast(x, cos, sin, layout), apply_rope(x, cos, sin, layout))
    assert len(compiled) == 2


def test_small_inputs_and_switch_off_stay_eager(compiled, monkeypatch):
    cos, sin = tables(5, 8)
    x = torch.randn(1, 2, 5, 16)
    monkeypatch.setattr(rk, "COMPILE_MIN_NUMEL", x.numel() + 1)
    apply_rope_fast(x, cos, sin)
    monkeypatch.setattr(rk, "COMPILE_MIN_NUMEL", 0)
    monkeypatch.setattr(compiled_mod, "ENABLED", False)
    apply_rope_fast(x, cos, sin)
    assert compiled == []


def test_compile_failure_falls_back_once(compiled, monkeypatch):
    tries = []

    def broken(x, cos, sin, layout):
        tries.append(1)
        raise RuntimeError("no C compiler\nmore lines")

    monkeypatch.setattr(rk.KERNEL, "compiled", broken)
    cos, sin = tables(5, 8)
    x = torch.randn(1, 2, 5, 16)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        out = apply_rope_fast(x, cos, sin)
    assert torch.equal(out, apply_rope(x, cos, sin))
    assert rk.compiled_rope_failed() == "RuntimeError: no C compiler"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(apply_rope_fast(x, cos, sin), out)  # no retry, no warning
    assert tries == [1]


def test_bad_input_raises_without_disabling_the_kernel(compiled):
    cos, sin = tables(5, 8)
    with pytest.raises(ValueError, match="layout"):
        apply_rope_fast(torch.randn(1, 2, 5, 16), cos, sin, "gptj")
    with pytest.raises(RuntimeError):  # 6 positions against tables of 5
        apply_rope_fast(torch.randn(1, 2, 6, 16), cos, sin)
    assert rk.compiled_rope_failed() is None


def test_encodings_rotate_with_the_fast_kernel(compiled):
    q, k = torch.randn(1, 4, 9, 16), torch.randn(1, 2, 9, 16)
    rope = posenc.create("rope", head_dim=16)
    q2, k2 = rope(q, k)
    cos, sin = rope.rotation(torch.arange(9))
    assert torch.equal(q2, apply_rope(q, cos, sin)) and torch.equal(k2, apply_rope(k, cos, sin))
    assert len(compiled) == 2
    for name in ("xpos", "rope_2d"):
        posenc.create(name, head_dim=16)(q, k, positions=_positions(name))
    assert len(compiled) == 6


def _positions(name):
    return None if name == "xpos" else posenc.positions.grid(3, 3)


def test_under_compile_the_reference_is_inlined(compiled):
    cos, sin = tables(5, 8)
    x = torch.randn(1, 2, 5, 16)
    fn = torch.compile(apply_rope_fast, fullgraph=True, dynamic=True)
    assert torch.equal(fn(x, cos, sin), apply_rope(x, cos, sin))
    assert compiled == []  # the inner kernel never ran: the outer graph holds the formula


def test_func_transforms_use_the_reference(compiled, tol):
    cos, sin = tables(5, 8)
    x = torch.randn(3, 1, 2, 5, 16)
    rotated = torch.vmap(lambda t: apply_rope_fast(t, cos, sin))(x)
    assert torch.equal(rotated, apply_rope(x.flatten(0, 1), cos, sin).unflatten(0, (3, 1)))
    grad = torch.func.grad(lambda t: apply_rope_fast(t, cos, sin).square().sum())(x[0])
    # a rotation keeps norms: the gradient of |R x|² is 2 Rᵀ R x = 2x, to the roundings of
    # two rotations (two products and a sum each) of values up to 2·2·max|x|
    torch.testing.assert_close(grad, 2 * x[0], **tol(n=6, scale=4 * x.abs().max().item()))
    assert compiled == []


def test_jit_trace_records_the_reference(compiled):
    cos, sin = tables(5, 8)
    x = torch.randn(1, 2, 5, 16)
    # (check_trace would run the function again, untraced, to compare)
    traced = torch.jit.trace(lambda t: apply_rope_fast(t, cos, sin), (x,), check_trace=False)
    assert torch.equal(traced(x), apply_rope(x, cos, sin)) and compiled == []


def test_cpu_path_needs_no_triton(compiled):
    """The CPU kernel compiles where Triton cannot be imported (a process of its own, with
    the import blocked: Triton is a test dependency, for the GPU kernel's tests, so this
    one may have imported it) and equals the eager rotation."""
    cos, sin = tables(5, 8)
    apply_rope_fast(torch.randn(1, 2, 5, 16), cos, sin)
    assert compiled
    code = (
        "import sys\n"
        "sys.modules['triton'] = None  # import triton raises ImportError\n"
        "import torch\n"
        "from posenc.functional import apply_rope, compiled, rope_cos_sin\n"
        "from posenc.functional import rope_kernel as rk\n"
        "compiled.ENABLED, rk.COMPILE_MIN_NUMEL = True, 0\n"
        "cos, sin = rope_cos_sin(torch.arange(5), torch.ones(8))\n"
        "x = torch.randn(1, 2, 5, 16)\n"
        "assert torch.equal(rk.apply_rope_fast(x, cos, sin), apply_rope(x, cos, sin))\n"
        "print(rk.KERNEL.failed)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "None", run.stdout


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "rope"},
        {
            "name": "rope",
            "scaling": {
                "rope_type": "dynamic",
                "factor": 2.0,
                "original_max_position_embeddings": 64,
            },
        },
    ],
)
def test_decode_step_computes_one_position(kwargs):
    kwargs = dict(kwargs)
    # a decode step at position 100,000 builds its tables for that one position: the same
    # work as at position 100 (nothing is tabulated up to the position)
    encoding = posenc.create(kwargs.pop("name"), head_dim=16, **kwargs)
    for position in (100, 100_000):
        rotation = encoding.rotation(torch.tensor([position]), seq_len=position + 1)
        assert [tuple(t.shape) for t in rotation] == [(1, 8)] * len(rotation)
        q = torch.randn(1, 2, 1, 16)
        assert encoding.rotate(q, rotation).shape == q.shape


def test_offset_is_checked_against_the_head():
    """The rotary channels start at ``offset`` and must fit in the head: an offset that
    pushes them past it, a negative one or a float is named."""
    cos, sin = rope_cos_sin(torch.arange(3), rope_inv_freq(4)[0])  # 2 pairs
    x = torch.randn(1, 1, 3, 8)
    tail = rk.apply_rope_fast(x, cos, sin, offset=4)
    assert torch.equal(tail, torch.cat([x[..., :4], apply_rope(x[..., 4:], cos, sin)], -1))
    with pytest.raises(ValueError, match="x has 3 channels from offset 5"):
        rk.apply_rope_fast(x, cos, sin, offset=5)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        rk.apply_rope_fast(x, cos, sin, offset=-1)
    with pytest.raises(TypeError, match="offset must be an int"):
        rk.apply_rope_fast(x, cos, sin, offset=1.0)
    with pytest.raises(ValueError, match="kernel must be one of"):
        rk.apply_rope_fast(x, cos, sin, kernel="cuda")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("batch", [1, 3])
def test_heads_side_by_side_turn_as_the_pair_does_to_the_bit(layout, batch):
    """rotate_heads_checked of q's and k's heads in one view (a projection's, strided)
    equals rotate_pair_checked of q and k apart, bit for bit, where that takes one pass;
    None where it would not (past the size, an offset, a compiled graph's path)."""
    from posenc.functional.rope import widen_tables
    from posenc.functional.rope_kernel import (
        COMPILE_MIN_NUMEL,
        rotate_heads_checked,
        rotate_pair_checked,
    )

    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(batch, 5, 6, 16, generator=gen).transpose(1, 2)  # [b, 6 heads, 5, 16]
    angles = torch.rand(5, 8, generator=gen, dtype=torch.float64) * 10
    cos, sin = angles.cos().float(), angles.sin().float()
    qk = qkv[:, :4]  # 3 query heads, 1 key head
    q, k = qk.split_with_sizes([3, 1], dim=1)
    want_q, want_k = rotate_pair_checked(q, k, cos, sin, layout)
    for wide in (False, True):
        tables = widen_tables(cos, sin, layout) if wide else (cos, sin)
        turned = rotate_heads_checked(qk, *tables, layout, wide=wide)
        assert turned is not None and turned.shape == qk.shape
        assert torch.equal(turned[:, :3], want_q) and torch.equal(turned[:, 3:], want_k)
    assert rotate_heads_checked(qk, cos[:, :4], sin[:, :4], layout, offset=8) is None
    big = torch.zeros(1, 2, COMPILE_MIN_NUMEL // 32, 16)
    assert (
        rotate_heads_checked(
            big, cos[:1].expand(big.shape[2], -1), sin[:1].expand(big.shape[2], -1), layout
        )
        is None
    )
