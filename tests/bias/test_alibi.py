"""ALiBi: slopes against the paper and BLOOM, the bias against a loop over positions, and
KV-cache decoding (the fused SDPA path: tests/attn/test_linear_bias.py; every backend:
tests/attn/test_backends.py)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc.bias.alibi import ALiBi
from posenc.functional.alibi import alibi_bias, alibi_slopes
from posenc.models import TransformerLM


def naive_bias(slopes, q_positions, k_positions, symmetric=False):
    """The paper's bias, one score at a time: -m_h (i - j), or -m_h |i - j|."""
    out = torch.empty(len(slopes), len(q_positions), len(k_positions), dtype=torch.float64)
    for h, m in enumerate(slopes):
        for a, i in enumerate(q_positions.tolist()):
            for b, j in enumerate(k_positions.tolist()):
                out[h, a, b] = -m * (abs(i - j) if symmetric else i - j)
    return out


# slopes ------------------------------------------------------------------------------------


def test_slopes_are_the_papers():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    assert alibi_slopes(16)[1::2].tolist() == alibi_slopes(8).tolist()
    assert alibi_slopes(1).tolist() == [2.0**-8]
    assert alibi_slopes(8).dtype == torch.float64
    # 6 heads: the 4 of a 4-head model, then slopes 0 and 2 of the 8-head sequence
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    enc = posenc.create("alibi", n_heads=8)
    assert enc.slopes().dtype == torch.float32
    assert enc.slopes().tolist() == [2.0**-i for i in range(1, 9)]


def test_slopes_take_a_floating_dtype_and_a_device_only():
    """dtype=None would return the float64 slopes unrounded, an int dtype truncate them."""
    enc = posenc.create("alibi", n_heads=8)
    assert enc.slopes("cpu", torch.float64).tolist() == [2.0**-i for i in range(1, 9)]
    for dtype in (None, torch.int64, "float32"):
        with pytest.raises(TypeError, match=r"dtype must be a floating-point torch\.dtype"):
            enc.slopes(dtype=dtype)
    with pytest.raises(TypeError, match="device"):
        enc.slopes(device=1)
    with pytest.raises(ValueError, match="device"):
        enc.slopes(device="no-such-cpu")


def test_linear_slopes_take_a_bool():
    """A truthy string never picks the causal form of a symmetric ALiBi."""
    enc = posenc.create("alibi", n_heads=4, symmetric=True)
    assert enc.linear_slopes(False) is None and enc.linear_slopes(True) == [
        2.0**-i for i in (2, 4, 6, 8)
    ]
    for causal in (None, "no", 1):
        with pytest.raises(TypeError, match="causal must be a bool"):
            enc.linear_slopes(causal)


@given(st.integers(0, 8))
def test_slopes_of_powers_of_two_are_geometric(log2_n):
    n = 2**log2_n
    slopes = alibi_slopes(n)
    first = 2 ** (-8 / n)
    torch.testing.assert_close(slopes, first ** torch.arange(1, n + 1, dtype=torch.float64))
    assert slopes[-1].item() == 2.0**-8


@given(st.integers(1, 200))
def test_other_head_counts_interleave_the_next_power(tol, n):
    c = 2 ** (n.bit_length() - 1)
    slopes = alibi_slopes(n)
    # exp2 in a vector lane and in the scalar tail may each be off by an ulp (float64): two
    # apart at most; the float32 slopes may not differ
    expected = torch.cat((alibi_slopes(c), alibi_slopes(2 * c)[0::2][: n - c]))
    torch.testing.assert_close(slopes, expected, **tol(torch.float64, n=2, scale=0))
    assert torch.equal(slopes.float(), expected.float())
    assert bool((slopes > 0).all()) and len(set(slopes.tolist())) == n


@pytest.mark.parametrize("n_heads", [*range(1, 65)])
def test_slopes_and_softmax_match_bloom(n_heads, tol):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    length = 12
    # BLOOM's tensor is slope * key position: the bias up to the row constant -slope * i
    theirs = bloom.build_alibi_tensor(torch.ones(1, length), n_heads, torch.float32)[:, 0]
    positions = torch.arange(length)
    ours = posenc.create("alibi", n_heads=n_heads).bias(positions, positions)
    # BLOOM raises a float32 base (off by eps/2) to the power k <= n_heads: off by k·eps/2;
    # ours are float32 roundings of float64 slopes. A wrong rule is off by at least the
    # ratio of neighbouring slopes, 2^(1/8)
    slope_err = tol(n=n_heads + 2, scale=0)
    torch.testing.assert_close(theirs[:, 1], ours[:, 0, 1] - ours[:, 0, 0], **slope_err)
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    scores = torch.randn(n_heads, length, length)
    ours_p = (scores + ours).masked_fill(~mask, -math.inf).softmax(-1)
    theirs_p = (scores + theirs[:, None, :]).masked_fill(~mask, -math.inf).softmax(-1)
    # biases of up to (length - 1)·slope (slopes <= 1) off by slope_err move the weights by
    # twice that relatively; the softmax adds its normaliser's length + 2 roundings
    weights = tol(n=2 * (length - 1) * (n_heads + 2) + length + 2, scale=1)
    torch.testing.assert_close(ours_p, theirs_p, **weights)


# the bias ----------------------------------------------------------------------------------


@pytest.mark.parametrize("symmetric", [False, True])
def test_bias_matches_a_loop_over_positions(symmetric, tol):
    enc = posenc.create("alibi", n_heads=12, symmetric=symmetric)
    q_pos, k_pos = torch.tensor([100, 103, 107]), torch.arange(95, 110)
    expected = naive_bias(alibi_slopes(12).tolist(), q_pos, k_pos, symmetric)
    bias = enc.bias(q_pos, k_pos)
    assert bias.dtype == torch.float32 and bias.shape == (12, 3, 15)
    # the float32 slope (eps/2) times the exact distance, rounded once (eps/2)
    torch.testing.assert_close(bias, expected.float(), **tol(n=1, scale=0))
    torch.testing.assert_close(enc.bias(q_pos.double(), k_pos.double()), expected)
    batched = enc.bias(torch.stack((q_pos, q_pos + 1)), torch.stack((k_pos, k_pos + 1)))
    # elementwise: the same slopes times the same (exact) distances, each rounded once
    torch.testing.assert_close(batched, torch.stack((bias, bias)), rtol=0, atol=0)


def test_farther_keys_always_score_lower():
    q_pos, k_pos = torch.tensor([50]), torch.arange(0, 101)
    causal = posenc.create("alibi", n_heads=5).bias(q_pos, k_pos)[:, 0]  # [heads, keys]
    assert bool((causal[:, 1:51] > causal[:, :50]).all())  # keys before the query
    assert bool((causal[:, 50] == 0).all())
    symmetric = posenc.create("alibi", n_heads=5, symmetric=True).bias(q_pos, k_pos)[:, 0]
    assert bool((symmetric[:, 1:51] > symmetric[:, :50]).all())
    assert bool((symmetric[:, 51:] < symmetric[:, 50:-1]).all())  # and after it
    # keys before the query: |i - j| = i - j, the same product rounded once
    torch.testing.assert_close(symmetric[:, :51], causal[:, :51], rtol=0, atol=0)


@given(st.integers(0, 10**6), st.integers(1, 16))
def test_bias_depends_only_on_the_distance(shift, n_heads):
    enc = posenc.create("alibi", n_heads=n_heads)
    q_pos, k_pos = torch.arange(5), torch.arange(7)
    torch.testing.assert_close(enc.bias(q_pos + shift, k_pos + shift), enc.bias(q_pos, k_pos))


def test_custom_slopes_and_a_subset_of_heads():
    q_pos, k_pos = torch.arange(4, 8), torch.arange(8)
    enc = posenc.create("alibi", n_heads=3, slopes=[0.3, 2.0, 0.01])
    assert enc.config.slopes == (0.3, 2.0, 0.01)
    expected = naive_bias([0.3, 2.0, 0.01], q_pos, k_pos).float()
    torch.testing.assert_close(enc.bias(q_pos, k_pos), expected)
    # the first 3 of 8 heads get the slopes of a 3-head model, the other 5 no bias
    subset = posenc.create("alibi", n_heads=8, alibi_heads=3)
    slopes = [*alibi_slopes(3).tolist(), 0, 0, 0, 0, 0]
    torch.testing.assert_close(subset.slopes(), torch.tensor(slopes, dtype=torch.float32))
    torch.testing.assert_close(subset.bias(q_pos, k_pos), naive_bias(slopes, q_pos, k_pos).float())
    custom_subset = posenc.create("alibi", n_heads=4, alibi_heads=2, slopes=[1.0, 0.5])
    assert custom_subset.slopes().tolist() == [1.0, 0.5, 0.0, 0.0]


def test_functional_bias_is_differentiable_in_slopes_and_positions():
    slope = torch.tensor([0.5, 0.25], dtype=torch.float64, requires_grad=True)
    q_pos = torch.tensor([3.0, 4.5], dtype=torch.float64, requires_grad=True)
    k_pos = torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64)
    bias = alibi_bias(slope.view(-1, 1, 1), q_pos.view(1, -1, 1), k_pos.view(1, 1, -1))
    torch.testing.assert_close(bias, naive_bias([0.5, 0.25], q_pos.detach(), k_pos))
    assert torch.autograd.gradcheck(
        lambda s, p: alibi_bias(s.view(-1, 1, 1), p.view(1, -1, 1), k_pos, symmetric=True),
        (slope, q_pos),
    )


def test_config_is_strict():
    cases = [
        ({"n_heads": 4, "symmetric": 1}, TypeError, "symmetric must be a bool"),
        ({"n_heads": 4, "alibi_heads": 5}, ValueError, r"alibi_heads \(5\) exceeds n_heads"),
        ({"n_heads": 4, "alibi_heads": 0}, ValueError, "alibi_heads must be >= 1"),
        ({"n_heads": 2, "slopes": [0.5]}, ValueError, "slopes has 1 values but 2 heads"),
        ({"n_heads": 2, "slopes": [0.5, 0.0]}, ValueError, r"slopes\[1\] must be > 0"),
        ({"n_heads": 2, "slopes": [0.5, math.inf]}, ValueError, r"slopes\[1\] must be finite"),
        ({"n_heads": 2, "slopes": "ab"}, TypeError, "slopes must be a list"),
        ({"n_heads": 2, "slopes": [0.5, "x"]}, TypeError, r"slopes\[1\] must be a number"),
    ]
    for config, exc, match in cases:
        with pytest.raises(exc, match=match):
            posenc.create("alibi", **config)
    enc = posenc.create("alibi", n_heads=3, slopes=[1, 2, 3])
    assert posenc.create("alibi", **enc.config.to_dict()).config == enc.config
    assert not list(enc.parameters()) and not list(enc.buffers())


# models ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoding", ["alibi", {"name": "alibi", "alibi_heads": 3}], ids=["all", "subset"]
)
def test_transformer_lm_kv_cache_generation_equals_recomputation(
    encoding, sharpen, check_cached_decoding
):
    """A prompt longer than ``SMALL_Q`` prefills through the extended SDPA, then each
    token decodes through the materialised bias; 6 heads are not a power of two."""
    model = TransformerLM(
        vocab_size=41, dim=48, n_layers=2, n_heads=6, n_kv_heads=2, encoding=encoding
    ).eval()
    assert isinstance(model.encoding, ALiBi)
    sharpen(model, std=0.3)
    check_cached_decoding(model, torch.randint(0, 41, (2, 40)), 6)


def test_head_slopes_are_computed_once_per_device_and_dtype():
    """Every head's slope is computed once per device and dtype (issue 53) and read by
    index, the same bits as the formula per index; a new config computes them anew."""
    import dataclasses

    enc = posenc.create("alibi", n_heads=6, alibi_heads=5)
    head = torch.arange(6).view(-1, 1, 1)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        assert torch.equal(enc.head_slopes(head, dtype), enc._head_slopes(head, dtype))
    table = enc.derived(("slopes", torch.device("cpu"), torch.float32), lambda: None)
    assert table is not None and enc.head_slopes(torch.arange(6)).data_ptr() != table.data_ptr()
    assert enc.derived(("slopes", torch.device("cpu"), torch.float32), lambda: None) is table
    enc.config = dataclasses.replace(enc.config, slopes=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert enc.head_slopes(torch.arange(6)).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 0.0]
    floats = torch.arange(6.0)  # not an index: the formula
    assert torch.equal(enc.head_slopes(floats), enc._head_slopes(floats, torch.float32))
