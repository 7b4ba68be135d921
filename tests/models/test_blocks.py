"""posenc.models.blocks: grouped-query self-attention against a loop over heads, and the
pre-norm block's two residual branches."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.attn import AttentionContext
from posenc.models import Block, SelfAttention

DIM, HEADS, KV_HEADS, SEQ = 24, 6, 2, 7
#: float32 rounding of reductions over DIM (projections) and SEQ (softmax, values) terms,
#: summed in another order than SDPA's
TOL = 8 * torch.finfo(torch.float32).eps * (DIM + SEQ)


def naive_attention(layer: SelfAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v, one query head at a time, each reading key/value head
    ``h // (heads / kv_heads)`` (Ainslie et al. 2023)."""
    hd = layer.head_dim
    w = layer.qkv.weight
    wq, wk, wv = (
        w[: HEADS * hd],
        w[HEADS * hd : (HEADS + KV_HEADS) * hd],
        w[(HEADS + KV_HEADS) * hd :],
    )
    heads = []
    for h in range(HEADS):
        g = h // (HEADS // KV_HEADS)
        q = x @ wq[h * hd : (h + 1) * hd].T  # [b, s, hd]
        k = x @ wk[g * hd : (g + 1) * hd].T
        v = x @ wv[g * hd : (g + 1) * hd].T
        scores = q @ k.transpose(1, 2) / math.sqrt(hd)  # [b, s, s]
        if causal:
            scores = scores.masked_fill(torch.ones(SEQ, SEQ).triu(1).bool(), float("-inf"))
        heads.append(scores.softmax(dim=-1) @ v)
    return torch.cat(heads, dim=-1) @ layer.out.weight.T


def inputs(causal: bool) -> dict:
    """The keywords of a layer without positions, masks or a cache."""
    context = AttentionContext.build(SEQ, SEQ, 2, torch.device("cpu"))
    none = posenc.create("nope")
    return {"encoding": none, "rotation": None, "context": context, "causal": causal}


def test_grouped_query_attention_equals_a_loop_over_heads():
    layer = SelfAttention(DIM, HEADS, KV_HEADS)
    x = torch.randn(2, SEQ, DIM)
    for causal in (True, False):
        ours = layer(x, **inputs(causal))
        assert_close(ours, naive_attention(layer, x, causal), atol=TOL, rtol=TOL)


def test_block_is_two_pre_norm_residual_branches():
    block = Block(DIM, HEADS, KV_HEADS, mlp_ratio=2)
    x = torch.randn(2, SEQ, DIM)
    h = x + block.attn(block.attn_norm(x), **inputs(True))
    assert_close(block(x, **inputs(True)), h + block.mlp(block.mlp_norm(h)))


def test_projections_name_the_linears_that_read_and_write_the_residual_stream():
    block = Block(DIM, HEADS, KV_HEADS, mlp_ratio=2)
    (qkv, up), (out, down) = block.projections()
    assert qkv is block.attn.qkv and out is block.attn.out
    assert up is block.mlp[0] and down is block.mlp[2]
    assert up.in_features == DIM and down.out_features == DIM


@pytest.mark.parametrize("build", [SelfAttention, lambda *a, **k: Block(*a[:3], 2, *a[3:], **k)])
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "name"),
    [
        ((None, 2, 1), {}, TypeError, "dim"),
        ((-8, 2, 1), {}, ValueError, "dim"),
        ((8, True, 1), {}, TypeError, "n_heads"),
        ((8, 3, 1), {}, ValueError, "n_heads"),
        ((8, 2, -1), {}, ValueError, "n_kv_heads"),
        ((8, 4, 3), {}, ValueError, "n_kv_heads"),
        ((8, 2, 1, "rope"), {}, TypeError, "spec"),
        ((8, 2, 1), {"scale": math.nan}, ValueError, "scale"),
        ((8, 2, 1), {"scale": "0.5"}, TypeError, "scale"),
    ],
)
def test_layers_refuse_bad_sizes_by_name(build, args, kwargs, error, name):
    """SelfAttention and Block built alone name a bad size, spec or scale (they were torch's
    errors from inside nn.Linear, or a negative n_kv_heads and a string scale accepted)."""
    with pytest.raises(error, match=name):
        build(*args, **kwargs)


def test_block_refuses_a_bad_mlp_ratio():
    with pytest.raises(TypeError, match="mlp_ratio"):
        Block(8, 2, 1, 1.5)  # type: ignore[arg-type]
