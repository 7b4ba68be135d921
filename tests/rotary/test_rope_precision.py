"""How far posenc's RoPE and transformers' are from exact, as the README and docs/tour.md
state: posenc's angles are float64 reduced mod 2π, so its rotation stays within a few float32
roundings of a float64 reference at any position; transformers' angles are a float32
product, whose error grows with the position (transformers#29496)."""

from __future__ import annotations

import pytest
import torch

import posenc

HEAD_DIM, BASE = 128, 10_000.0


def exact(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The half-layout rotation of ``x`` ``[1, 1, seq, d]`` in float64."""
    inv = 1.0 / BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    angles = positions.double()[:, None] * inv
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)
    x1, x2 = x.double().chunk(2, dim=-1)
    return x.double() * cos + torch.cat([-x2, x1], dim=-1) * sin


@pytest.mark.parametrize("length", [1024, 4096])
def test_posenc_stays_exact_where_transformers_drifts(length):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    torch.manual_seed(0)
    x = torch.randn(1, 1, length, HEAD_DIM)
    positions = torch.arange(length)
    ours, _ = posenc.create("rope", head_dim=HEAD_DIM, base=BASE)(x, x)
    config = LlamaConfig(
        hidden_size=HEAD_DIM * 8, num_attention_heads=8, max_position_embeddings=length
    )
    cos, sin = llama.LlamaRotaryEmbedding(config)(x, positions[None])
    theirs, _ = llama.apply_rotary_pos_emb(x, x, cos, sin)
    reference = exact(x, positions)
    # float32: cos and sin rounded once, the pair's two products and their sum, each a
    # rounding of at most 2^-24 of |x1 cos| + |x2 sin| <= 2 max|x|
    assert (ours.double() - reference).abs().max() < 8 * 2**-24 * 2 * x.abs().max()
    # docs/tour.md's numbers: 1.3e-4 at 1,024 positions, 6.4e-4 at 4,096 (a float32 angle
    # of position p is off by up to p · 2^-24 radians)
    drift = (theirs.double() - reference).abs().max().item()
    assert length * 2**-24 < drift < length * 2**-24 * 2 * x.abs().max() * 8
