"""posenc.models.activation: the MLP's exact GELU on ATen's own CPU kernel, bit for bit the
kernel ATen runs with oneDNN off, forward and backward, in every dtype oneDNN would take."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from posenc.models.activation import GELU, gelu
from posenc.models.calls import mlp


def atens(x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """F.gelu of ``x`` and its gradient for ``grad``, with oneDNN off: ATen's kernel."""
    x = x.detach().clone().requires_grad_(True)
    with warnings.catch_warnings(), torch.backends.mkldnn.flags(enabled=False):
        warnings.simplefilter("ignore")  # a note on Intel GPUs' TF32
        out = F.gelu(x)
        out.backward(grad)
    return out.detach(), x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 1, 512), (3, 5, 7), (4, 96), (1, 9), (2, 3, 4, 5)])
def test_gelu_is_atens_kernel_bit_for_bit(shape, dtype):
    gen = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(shape, generator=gen)).to(dtype)
    grad = torch.randn(shape, generator=gen).to(dtype)
    want, want_grad = atens(x, grad)
    with torch.no_grad():  # the one-view path of decoding
        got = gelu(x)
    leaf = x.clone().requires_grad_(True)
    traced = gelu(leaf)  # the path a backward goes through
    traced.backward(grad)
    for out in (got, traced):
        assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
        assert torch.equal(out, want)
    assert torch.equal(leaf.grad, want_grad)


def test_gelu_is_closer_to_float64_than_a_bound_from_the_float32_ulp():
    x = torch.linspace(-8, 8, 4097)
    exact = F.gelu(x.double())
    # |gelu'| <= 1.13: a few float32 ulps of the larger of x and its GELU
    assert torch.all((gelu(x).double() - exact).abs() <= 8 * 2**-24 * (1 + exact.abs()))


def test_what_no_swap_helps_is_torchs_own_call():
    prime = torch.randn(1, 13)  # a prime count: no two sizes above 1 multiply to it
    assert torch.equal(gelu(prime), F.gelu(prime))
    tanh = torch.randn(4, 8)
    assert torch.equal(gelu(tanh, "tanh"), F.gelu(tanh, approximate="tanh"))
    meta = torch.empty(2, 8, device="meta")
    assert gelu(meta).shape == (2, 8) and gelu(meta).device.type == "meta"
    doubles = torch.randn(4, 8, dtype=torch.float64)  # not oneDNN's: ATen's already
    assert torch.equal(gelu(doubles), F.gelu(doubles))
    assert gelu(torch.empty(0, 4)).shape == (0, 4)


def test_the_module_is_torchs_gelu_to_its_users():
    layer = GELU()
    assert isinstance(layer, nn.GELU) and repr(layer) == repr(nn.GELU())
    assert layer.state_dict() == {} and layer.approximate == "none"
    x = torch.randn(2, 64)
    assert torch.equal(layer(x), gelu(x))
    assert torch.equal(GELU("tanh")(x), F.gelu(x, approximate="tanh"))


def test_a_block_mlp_runs_the_same_gelu_as_its_module_call():
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(16, 64, bias=False), GELU(), nn.Linear(64, 16, bias=False))
    x = torch.randn(1, 1, 16)
    assert torch.equal(mlp(seq, x), seq(x))
    seq[1].register_forward_hook(lambda *args: None)  # called as a module now: the same
    assert torch.equal(mlp(seq, x), seq(x))
