"""Every bias encoding on every attention backend: flex = SDPA = math (and ``auto``), forward
against float64 attention over the encoding's exact bias, and gradients.

One parametrised set of checks over every bias encoding in ``posenc.available()``, like the
conformance suite: the ``case`` fixture gives each encoding (and variant) with parameters
away from their initial values, its exact float64 bias and the bound on the error of its
float32 bias. A new bias encoding needs one entry in ``CASES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.testing import assert_close

import posenc
from posenc.base import (
    BiasEncoding,
    ReadsInput,
    RelativeTables,
    ScoreBias,
    ScoreWeights,
)

EPS = torch.finfo(torch.float32).eps
HEADS, HEAD_DIM = 4, 16
SCALE = HEAD_DIM**-0.5  # attention's default, and that of the dense reference


@dataclasses.dataclass(frozen=True)
class Case:
    """A bias encoding for these tests.

    ``make()`` builds it with parameters off their (often zero) initial values, so that a
    wrong bias or a lost gradient shows. ``float_positions``: the float64 bias comes from
    float64 positions (math); else the float32 bias is exact (table lookups) or near it.
    ``bias_err(enc, bias, q)``: an absolute bound on the error of the float32 bias the
    backends compute, against ``bias`` (float64) (0 where its rounding is relative to
    ``|bias|``, which :func:`_attention_tol` already counts).
    """

    make: Callable[[], BiasEncoding]
    float_positions: bool = True
    bias_err: Callable[[BiasEncoding, torch.Tensor, torch.Tensor], float] = lambda *_: 0.0

    def exact(self, enc, q_positions, k_positions, q):
        """The bias in float64: ``[(b,) heads, q_len, k_len]``."""
        if self.float_positions:
            q_positions, k_positions = q_positions.double(), k_positions.double()
        with torch.no_grad():
            return enc.bias(q_positions, k_positions, q=q, scale=SCALE).double()


def _randomize(enc: BiasEncoding, low=0.1, high=1.9) -> BiasEncoding:
    with torch.no_grad():
        for p in enc.parameters():
            p.uniform_(low, high)
    return enc


def _t5() -> BiasEncoding:
    enc = posenc.create("t5", n_heads=HEADS, num_buckets=8, max_distance=6)
    torch.nn.init.normal_(enc.weight)
    return enc


def _fire() -> BiasEncoding:
    """FIRE whose threshold L = 10 is crossed by the queries of these tests."""
    enc = posenc.create("fire", n_heads=HEADS, hidden=32, init_threshold=8.0)
    with torch.no_grad():
        enc.c.fill_(0.7)
        enc.threshold_scale.fill_(1.25)
    return enc


def _fire_err(enc, bias, q):
    """A float32 MLP input x < 4 (a few roundings), then a sum over the hidden units of
    w2·relu(w1·x + b1), plus b2: hidden + 8 roundings of terms up to Σ|w2|·(|w1|·4 + |b1|)
    + |b2|."""
    first, second = enc.mlp[0], enc.mlp[2]
    hidden = first.weight[:, 0].abs() * 4.0 + first.bias.abs()
    terms = (second.weight.abs() @ hidden + second.bias.abs()).max().item()
    n = enc.config.hidden + 8
    return n * EPS * (terms + bias.abs().max().item())


def _kerple_err(enc, bias, q):
    """r2·d, 1 + ·, the log or the power, r1·: four roundings of terms up to |bias|; the 1
    in log(1 + r2·d) rounds at eps·r1."""
    size = bias.abs().max().item()
    return 4 * EPS * (size + enc.r1.abs().max().item()) + 4 * EPS * size


def _shaw_err(enc, bias, q):
    """q·a^K·scale: a dot product over d, d + 1 roundings of terms up to scale·Σ|q_l a_l|."""
    terms = SCALE * q.abs() @ enc.key_table.detach().abs().T  # [b, h, q_len, rows]
    return (q.shape[-1] + 1) * EPS * terms.max().item()


CASES = {
    "alibi": Case(lambda: posenc.create("alibi", n_heads=HEADS)),
    "alibi-symmetric": Case(lambda: posenc.create("alibi", n_heads=HEADS, symmetric=True)),
    "fire": Case(_fire, bias_err=_fire_err),
    "kerple-log": Case(
        lambda: _randomize(posenc.create("kerple", n_heads=HEADS)), bias_err=_kerple_err
    ),
    "kerple-power": Case(
        lambda: _randomize(posenc.create("kerple", n_heads=HEADS, variant="power")),
        bias_err=_kerple_err,
    ),
    "shaw": Case(
        lambda: posenc.create(
            "shaw", n_heads=HEADS, head_dim=HEAD_DIM, max_distance=3, init_std=1.0
        ),
        float_positions=False,
        bias_err=_shaw_err,
    ),
    "t5": Case(_t5, float_positions=False),
}


@pytest.fixture(params=sorted(CASES))
def case(request) -> Case:
    """Each bias encoding (and variant) of ``CASES``: see :class:`Case`."""
    return CASES[request.param]


def test_every_bias_encoding_has_a_case():
    """Every bias of positions; FoX's and PaTH's read the layer's input, CoPE's the scores,
    and stick-breaking's weights replace the softmax: their backends, masks and gradients
    are tested in tests/bias/test_fox.py, test_path.py, test_cope.py and
    test_stick_breaking.py."""
    bias = {
        name
        for name in posenc.available()
        if posenc.info(name).kind == "bias"
        and not issubclass(posenc.registry.get(name), ReadsInput)
        and not issubclass(posenc.registry.get(name), ScoreBias | ScoreWeights)
    }
    covered = {type(case.make()).info.name for case in CASES.values()}
    assert bias <= covered, f"add a Case for {sorted(bias - covered)}"


def qkv(q_len, k_len, kv_heads=2):
    return (
        torch.randn(2, HEADS, q_len, HEAD_DIM),
        torch.randn(2, kv_heads, k_len, HEAD_DIM),
        torch.randn(2, kv_heads, k_len, HEAD_DIM),
    )


def grads(out, tensors, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad(out, tensors, g.to(out.device))


#: compiled flex attention costs 8-40 s of inductor compile per encoding on a cold cache
#: (FIRE's unrolled MLP the most), as a clean CI machine has it: the default suite runs flex
#: for non-causal T5 here (a per-distance bias, no mask) and for causal ALiBi with segments
#: in ``test_masks`` (a linear bias, a block mask), ``make test-slow`` for every case
FLEX_DEFAULT = ((False, "t5"),)
FLEX_CASES = [
    (causal, n) if (causal, n) in FLEX_DEFAULT else pytest.param(causal, n, marks=pytest.mark.slow)
    for causal in (True, False)
    for n in CASES
]


def agree_with_float64(case, causal, backends, dense_attention, attention_tol):
    """Each of ``backends`` within the rounding bound of float64 attention over the exact
    bias, in the KV-cache layout: 24 queries after 16 cached keys. Returns the outputs."""
    enc = case.make()
    q, k, v = qkv(24, 40)
    bias = case.exact(enc, torch.arange(16, 40), torch.arange(40), q)
    expected = dense_attention(q, k, v, bias, causal=causal).float()
    err = case.bias_err(enc, bias, q)  # the float32 bias of each path
    rounding = attention_tol(q, k, v, bias, causal=causal, score_err=err)
    outs = {}
    for backend in backends:
        if (isinstance(enc, RelativeTables) and enc.adds_to_values) and backend not in (
            "auto",
            "math",
        ):
            continue
        with torch.no_grad():  # compiled flex has no backward on CPU
            outs[backend] = posenc.attention(q, k, v, enc, causal=causal, backend=backend)
        assert_close(outs[backend], expected, **rounding, msg=backend)
    if "flex" in outs:  # both off the reference by at most the bound: twice it apart
        assert_close(outs["flex"], outs["math"], atol=2 * rounding["atol"], rtol=0)
    return outs


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_and_math_agree(case, causal, dense_attention, attention_tol):
    agree_with_float64(case, causal, ("auto", "sdpa", "math"), dense_attention, attention_tol)


@pytest.mark.parametrize(("causal", "name"), FLEX_CASES)
def test_flex_agrees(causal, name, dense_attention, attention_tol, backends):
    if "flex" not in backends:
        pytest.skip("compiled flex attention does not run on this CPU")
    agree_with_float64(CASES[name], causal, ("flex", "math"), dense_attention, attention_tol)


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_and_math_gradients_agree(case, causal, grad_tol, score_size):
    """Gradients into q, k, v and every parameter through SDPA and ``auto`` (training on the
    CPU: SDPA, or the encoding's own fused path) equal the math path's."""
    enc = case.make()
    q, k, v = (t.requires_grad_() for t in qkv(5, 12))  # queries 7..11 around FIRE's L = 10
    tensors = (q, k, v, *enc.parameters())
    expected = grads(posenc.attention(q, k, v, enc, causal=causal, backend="math"), tensors)
    bias = enc.bias(torch.arange(7, 12), torch.arange(12), q=q.detach(), scale=SCALE)
    size = score_size(q, k, bias, scale=SCALE, causal=causal)
    rounding = grad_tol(q, k, expected, size)
    for backend in ("sdpa", "auto"):
        if (isinstance(enc, RelativeTables) and enc.adds_to_values) and backend == "sdpa":
            continue
        got = grads(posenc.attention(q, k, v, enc, causal=causal, backend=backend), tensors)
        for g, e in zip(got, expected, strict=True):
            assert_close(g, e, **rounding, msg=backend)
    assert all(bool((g != 0).any()) for g in expected[3:])


@pytest.mark.filterwarnings("ignore:.*flex_attention.*:UserWarning")
@pytest.mark.parametrize(  # FIRE's MLP per score in eager flex: half a minute, in test-slow
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "fire" else n for n in CASES]
)
def test_score_mod_gradients_through_flex(name, grad_tol, score_size):
    """Flex's own autograd of the score_mod (eager flex; the compiled kernel has no
    backward on CPU) gives the math path's gradients into the encoding's parameters."""
    enc = CASES[name].make()
    params = list(enc.parameters())
    if not params:
        pytest.skip("no parameters")
    q, k, v = qkv(6, 16, kv_heads=HEADS)
    expected = grads(posenc.attention(q, k, v, enc, backend="math"), params)
    mask = create_block_mask(lambda b, h, i, j: j <= i + 10, None, None, 6, 16, device="cpu")
    mod = enc.score_mod(q=q, q_offset=10, scale=SCALE)
    out = flex_attention(q, k, v, score_mod=mod, block_mask=mask, scale=SCALE)
    bias = enc.bias(torch.arange(10, 16), torch.arange(16), q=q, scale=SCALE)
    size = score_size(q, k, bias, scale=SCALE, causal=True)
    rounding = grad_tol(q, k, expected, size)
    for g, e in zip(grads(out, params), expected, strict=True):
        assert_close(g, e, **rounding)
    assert all(bool((e != 0).any()) for e in expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled flex backward needs CUDA")
@pytest.mark.parametrize("causal", [True, False])
def test_compiled_flex_gradients_on_cuda(case, causal):
    enc = case.make().cuda()
    if isinstance(enc, RelativeTables) and enc.adds_to_values:
        pytest.skip("adds to the values: only the math path runs it")
    q, k, v = (t.cuda().requires_grad_() for t in qkv(24, 40))
    tensors = (q, k, v, *enc.parameters())
    expected = grads(posenc.attention(q, k, v, enc, causal=causal, backend="math"), tensors)
    got = grads(posenc.attention(q, k, v, enc, causal=causal, backend="flex"), tensors)
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e, atol=1e-4, rtol=1e-4)
