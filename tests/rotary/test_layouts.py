"""Converting q/k projections between the ``interleaved`` and ``half`` RoPE pair layouts."""

import types

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.functional import apply_rope, rope_cos_sin, rope_inv_freq
from posenc.rotary.layouts import layout_permutation, permute_for_layout

LAYOUTS = ("interleaved", "half")


def hf_llama_permute(w, n_heads, dim1, dim2):
    """The row permutation of Hugging Face's Llama conversion script (Meta's interleaved
    q/k -> HF's half layout), restated: view the rows of each head as [head_dim / 2, 2] and
    transpose to [2, head_dim / 2]."""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def project(x, weight, bias, n_heads, head_dim):
    """x [b, s, in] -> [b, heads, s, head_dim]."""
    b, s, _ = x.shape
    return torch.nn.functional.linear(x, weight, bias).view(b, s, n_heads, head_dim).transpose(1, 2)


@pytest.mark.parametrize(
    ("n_heads", "n_kv_heads", "rotary_dim"),
    [(8, 8, None), (8, 2, None), (8, 2, 8), (4, 4, 4)],
    ids=["mha", "gqa", "gqa-partial", "mha-partial"],
)
def test_permuted_checkpoint_gives_the_same_attention(
    n_heads, n_kv_heads, rotary_dim, attention_tol
):
    head_dim, dim, b, s = 16, 32, 2, 7
    x = torch.randn(b, s, dim)
    wq, wk = torch.randn(n_heads * head_dim, dim), torch.randn(n_kv_heads * head_dim, dim)
    wv = torch.randn(n_kv_heads * head_dim, dim)
    bq, bk = torch.randn(n_heads * head_dim), torch.randn(n_kv_heads * head_dim)
    v = project(x, wv, None, n_kv_heads, head_dim)
    outs = {}
    for layout in LAYOUTS:
        rope = posenc.create("rope", head_dim=head_dim, layout=layout, rotary_dim=rotary_dim)
        conv = {"n_heads": n_heads, "head_dim": head_dim, "dst": layout, "rotary_dim": rotary_dim}
        kv = {**conv, "n_heads": n_kv_heads}
        q = project(
            x, permute_for_layout(wq, **conv), permute_for_layout(bq, **conv), n_heads, head_dim
        )
        k = project(
            x, permute_for_layout(wk, **kv), permute_for_layout(bk, **kv), n_kv_heads, head_dim
        )
        outs[layout] = posenc.attention(q, k, v, encoding=rope)
    # Each layout projects with the same rows of W (permuted), then rotates (three roundings
    # of each q and k entry) and adds up the scores in its own order
    rounding = attention_tol(*rope(q, k), v, extra_n=6)
    assert_close(outs["half"], outs["interleaved"], **rounding)
    # a mismatched layout (the silent bug) changes the output
    rope_half = posenc.create("rope", head_dim=head_dim, layout="half", rotary_dim=rotary_dim)
    q, k = project(x, wq, bq, n_heads, head_dim), project(x, wk, bk, n_kv_heads, head_dim)
    assert not torch.allclose(posenc.attention(q, k, v, encoding=rope_half), outs["interleaved"])


@pytest.mark.parametrize("rotary_dim", [None, 4, 8])
def test_permutation_maps_one_layout_rotation_onto_the_other(rotary_dim):
    head_dim = 8
    n = (rotary_dim or head_dim) // 2
    x = torch.randn(1, 2, 5, head_dim)
    cos, sin = rope_cos_sin(torch.arange(5) + 40, rope_inv_freq(head_dim, rotary_dim=n * 2)[0])
    perm = layout_permutation(head_dim, "interleaved", "half", rotary_dim=rotary_dim)
    rotated = apply_rope(x, cos, sin, "interleaved")
    # both layouts compute x1·cos - x2·sin and x2·cos + x1·sin per pair, each op rounded once
    assert_close(apply_rope(x[..., perm], cos, sin, "half"), rotated[..., perm], rtol=0, atol=0)


def test_permutation_values_and_inverse():
    assert layout_permutation(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert layout_permutation(8, "half", "interleaved").tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert layout_permutation(8, rotary_dim=4).tolist() == [0, 2, 1, 3, 4, 5, 6, 7]
    for src in LAYOUTS:  # integer index tensors, and below: permutations are copies
        assert torch.equal(layout_permutation(6, src, src), torch.arange(6))
    for head_dim, rotary_dim in [(2, None), (64, None), (128, 64), (10, 6)]:
        there = layout_permutation(head_dim, "interleaved", "half", rotary_dim=rotary_dim)
        back = layout_permutation(head_dim, "half", "interleaved", rotary_dim=rotary_dim)
        assert there.dtype == torch.long and sorted(there.tolist()) == list(range(head_dim))
        assert torch.equal(there[back], torch.arange(head_dim))


@pytest.mark.parametrize("rotary_dim", [None, 16])
def test_round_trip_is_exactly_the_identity(rotary_dim):
    n_heads, head_dim = 8, 32
    w = torch.randn(n_heads * head_dim, 24, dtype=torch.bfloat16)
    half = permute_for_layout(w, n_heads, head_dim, "interleaved", "half", rotary_dim=rotary_dim)
    assert not torch.equal(half, w)
    back = permute_for_layout(half, n_heads, head_dim, "half", "interleaved", rotary_dim=rotary_dim)
    assert torch.equal(back, w) and back.dtype == w.dtype
    bias = torch.randn(n_heads * head_dim)
    there = permute_for_layout(bias, n_heads, head_dim, rotary_dim=rotary_dim)
    assert torch.equal(
        permute_for_layout(there, n_heads, head_dim, "half", "interleaved", rotary_dim=rotary_dim),
        bias,
    )


def test_same_layout_returns_an_unchanged_copy():
    w = torch.randn(16, 4)
    for layout in LAYOUTS:
        out = permute_for_layout(w, 2, 8, layout, layout)
        assert torch.equal(out, w)
        assert out.data_ptr() != w.data_ptr()
    out.add_(1)
    assert not torch.equal(out, w)  # the input is not shared


@pytest.mark.parametrize(("n_heads", "head_dim"), [(32, 128), (8, 128), (4, 64)])
def test_matches_the_hugging_face_llama_conversion(n_heads, head_dim):
    """The same rows as HF's ``permute``; also for the k projection of GQA (n_kv_heads)."""
    dim = 48
    w = torch.randn(n_heads * head_dim, dim)
    expected = hf_llama_permute(w, n_heads, n_heads * head_dim, dim)
    assert torch.equal(permute_for_layout(w, n_heads, head_dim), expected)


def test_matches_transformers_permute_for_rope():
    """transformers >= 5 ships the Llama permutation as ``PermuteForRope`` (and its inverse)."""
    loading = pytest.importorskip("transformers.core_model_loading")
    op = getattr(loading, "PermuteForRope", None)
    if op is None or not hasattr(op, "_permute_for_rope"):
        pytest.skip("this transformers version has no PermuteForRope._permute_for_rope")
    n_heads, head_dim = 4, 16
    config = types.SimpleNamespace(num_attention_heads=n_heads)
    for w in (torch.randn(n_heads * head_dim, 12), torch.randn(n_heads * head_dim)):
        forward = op()._permute_for_rope(w.clone(), config)
        inverse = op(inverse=True)._permute_for_rope(w.clone(), config)
        assert torch.equal(permute_for_layout(w, n_heads, head_dim), forward)
        assert torch.equal(permute_for_layout(w, n_heads, head_dim, "half", "interleaved"), inverse)


def test_wrong_shapes_raise_naming_the_numbers():
    w = torch.randn(8 * 16, 4)  # 8 heads of 16
    with pytest.raises(ValueError, match=r"128 rows but n_heads \* head_dim = 2 \* 16 = 32"):
        permute_for_layout(w, 2, 16)  # a k projection with n_kv_heads but q's row count
    with pytest.raises(ValueError, match=r"128 rows but n_heads \* head_dim = 8 \* 8 = 64"):
        permute_for_layout(w, 8, 8)
    with pytest.raises(ValueError, match=r"128 rows.*n_heads=n_kv_heads"):
        permute_for_layout(torch.randn(128), 2, 16)
    with pytest.raises(ValueError, match=r"head_dim must be even.*got 15"):
        permute_for_layout(torch.randn(15, 4), 1, 15)
    with pytest.raises(ValueError, match=r"rotary_dim must be even.*got 5"):
        permute_for_layout(w, 8, 16, rotary_dim=5)
    with pytest.raises(ValueError, match=r"rotary_dim \(32\) exceeds head_dim \(16\)"):
        permute_for_layout(w, 8, 16, rotary_dim=32)
    with pytest.raises(ValueError, match=r"got shape \(8, 16, 4\)"):
        permute_for_layout(w.view(8, 16, 4), 8, 16)
    with pytest.raises(ValueError, match=r"dst must be one of.*'neox'"):
        permute_for_layout(w, 8, 16, dst="neox")
    with pytest.raises(ValueError, match="n_heads must be >= 1, got 0"):
        permute_for_layout(w, 0, 16)


def test_a_wrong_device_is_named():
    """A device that is not one is posenc's error, not torch's."""
    with pytest.raises(TypeError, match="device"):
        layout_permutation(8, device=1)
    with pytest.raises(ValueError, match="device"):
        layout_permutation(8, device="no-such-cpu")
    assert layout_permutation(8, device="meta").is_meta
