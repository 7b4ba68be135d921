"""Shift-invariant biases from their 2L - 1 distances (posenc.attn.bias_blocks): the
table, its gradient, the blockwise CPU inference path and attention's use of it."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import attention, registry
from posenc.attn import bias as bias_module
from posenc.attn.bias_blocks import blockwise_bias_attention, shift_table
from posenc.attn.bias_grad import bias_flash_available

BIAS = [n for n in posenc.available() if posenc.info(n).kind == "bias"]
SHIFT_INVARIANT = ["alibi", "kerple", "t5"]


def _trained(name, n_heads=4):
    """The encoding with its parameters moved off their initial values (T5 starts at 0)."""
    enc = posenc.create(name, n_heads=n_heads)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return enc


def test_the_shift_invariant_encodings_are_the_expected_ones():
    claimed = [n for n in BIAS if registry.get(n).shift_invariant]
    assert claimed == SHIFT_INVARIANT


@pytest.mark.parametrize("name", SHIFT_INVARIANT)
def test_bias_depends_on_the_distance_only(name):
    # integer positions: the shifted differences are the same numbers, so the bias is equal
    enc = _trained(name)
    q_pos, k_pos = torch.randint(0, 300, (7,)), torch.randint(0, 300, (9,))
    for shift in (1, 17, 1000):
        assert torch.equal(enc.bias(q_pos + shift, k_pos + shift), enc.bias(q_pos, k_pos))


@pytest.mark.parametrize("name", SHIFT_INVARIANT)
def test_shift_table_equals_the_bias_and_its_gradient(name):
    enc = _trained(name)
    positions = torch.arange(37)
    weight = torch.randn(4, 37, 37)
    table = shift_table(enc, 37)
    assert torch.equal(table, enc.bias(positions, positions))  # the same values, copied
    params = list(enc.parameters())
    if not params:
        return
    got = torch.autograd.grad((table * weight).sum(), params)
    expected = torch.autograd.grad((enc.bias(positions, positions) * weight).sum(), params)
    for g, e in zip(got, expected, strict=True):
        # a sum over the 37² scores, in another order (per diagonal first)
        n = 37 * 37
        torch.testing.assert_close(g, e, **_tol(n, e))


def _tol(n, expected):
    eps = torch.finfo(torch.float32).eps
    return {"atol": n * eps * expected.abs().max().item() + 1e-30, "rtol": n * eps}


def _qkv(h, kv_h, n, d, dtype=torch.float32, strided=False):
    q = torch.randn(2, h, n, d, dtype=dtype)
    k, v = (torch.randn(2, kv_h, n, d, dtype=dtype) for _ in range(2))
    if strided:  # [b, n, h, d] storage, as from a projection
        q = torch.randn(2, n, h, d, dtype=dtype).transpose(1, 2)
    return q, k, v


@pytest.mark.skipif(not bias_flash_available(), reason="no CPU flash kernel")
@pytest.mark.parametrize("name", SHIFT_INVARIANT)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block", [None, 16, 7])  # one call, blocks, a short last block
def test_blockwise_equals_the_reference(name, causal, block, dense_attention, attention_tol):
    enc = _trained(name)
    q, k, v = _qkv(4, 2, 37, 8, strided=True)
    scale = 8**-0.5
    with torch.no_grad():  # an inference path
        out = blockwise_bias_attention(q, k, v, enc, scale, causal, block=block)
    positions = torch.arange(37)
    bias = enc.bias(positions, positions)
    expected = dense_attention(q, k, v, bias=bias, causal=causal)
    tol = attention_tol(q, k, v, bias=bias, scale=scale, causal=causal)
    torch.testing.assert_close(out.double(), expected, **tol)


@pytest.mark.skipif(not bias_flash_available(), reason="no CPU flash kernel")
@pytest.mark.parametrize("block", [None, 16])
def test_blockwise_bfloat16_keeps_a_float32_bias(block, dense_attention, attention_tol):
    enc = _trained("t5")
    q, k, v = _qkv(4, 4, 40, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        out = blockwise_bias_attention(q, k, v, enc, 8**-0.5, True, block=block)
    assert out.dtype == torch.bfloat16
    positions = torch.arange(40)
    bias = enc.bias(positions, positions)
    expected = dense_attention(q, k, v, bias=bias, causal=True)
    tol = attention_tol(q, k, v, bias=bias, causal=True)
    torch.testing.assert_close(out.double(), expected, **tol)


@pytest.mark.skipif(not bias_flash_available(), reason="no CPU flash kernel")
@pytest.mark.parametrize("name", SHIFT_INVARIANT)
def test_auto_takes_it_for_inference_and_equals_math(name, monkeypatch, attention_tol):
    enc = _trained(name)
    q, k, v = _qkv(4, 4, 300, 8)  # past flex's threshold: the path replaces flex too
    calls = []
    original = bias_module.blockwise_bias_attention
    monkeypatch.setattr(
        bias_module,
        "blockwise_bias_attention",
        lambda *a, **kw: calls.append(1) or original(*a, **kw),
    )
    with torch.no_grad():
        out = attention(q, k, v, enc)
        expected = attention(q, k, v, enc, backend="math")
    # ALiBi's fused linear-bias path comes first where it applies; the others take blocks
    assert len(calls) == 1 or name == "alibi"
    positions = torch.arange(300)
    bias = enc.bias(positions, positions)
    tol = attention_tol(q, k, v, bias=bias, causal=True)
    torch.testing.assert_close(out, expected, atol=2 * tol["atol"], rtol=0.0)


@pytest.mark.parametrize("case", ["explicit positions", "decode step", "training"])
def test_auto_keeps_other_paths_where_it_does_not_apply(case, monkeypatch):
    # explicit positions or a cached decode step (q_len != k_len) are not the default
    # arange(L) of both; training takes the flash kernel with its blockwise backward
    monkeypatch.setattr(bias_module, "blockwise_bias_attention", _fail)
    enc = _trained("t5")
    q, k, v = _qkv(4, 4, 300, 8)
    kwargs = {}
    if case == "explicit positions":
        kwargs = {"q_positions": torch.arange(300), "k_positions": torch.arange(300)}
    elif case == "decode step":
        q = q[:, :, -1:]
    with torch.set_grad_enabled(case == "training"):
        out = attention(q, k, v, enc, **kwargs)
    assert out.shape == q.shape


def _fail(*args, **kwargs):
    raise AssertionError("the blockwise path ran where it does not apply")
