"""p_rope (Barbero et al. 2025): a naive reference, transformers' "proportional" rope type
as the peer (the same formula), RoPE at p = 1, and bad input."""

import pytest
import torch

import posenc


def naive(x: torch.Tensor, positions: torch.Tensor, p: float, base: float = 10000.0):
    """Pairs (i, i + d/2) turn by m·θ_i, θ_i = base^(-2i/d) for i < p·d/2 and 0 after:
    written out in float64."""
    d = x.shape[-1]
    theta = [base ** (-2 * i / d) if i < int(p * d) // 2 else 0.0 for i in range(d // 2)]
    angle = positions.double()[:, None] * torch.tensor(theta, dtype=torch.float64)  # [s, d/2]
    a, b = x.double()[..., : d // 2], x.double()[..., d // 2 :]
    cos, sin = angle.cos(), angle.sin()
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


@pytest.mark.parametrize("p", [0.25, 0.5, 0.75, 1.0])
def test_equals_the_written_out_rotation(p):
    enc = posenc.create("p_rope", head_dim=32, p=p)
    q = torch.randn(2, 3, 9, 32, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(9) * 7
    ours, _ = enc(q, q.clone(), positions=positions)
    # float32 tables of angles below 64 rad against float64: ~64 · 2^-24 per element, |q| < 5
    torch.testing.assert_close(ours.double(), naive(q, positions, p), atol=2e-5, rtol=0)
    still = [i for i in range(16) if i >= int(p * 32) // 2]  # the pairs that do not turn
    cols = still + [i + 16 for i in still]
    assert torch.equal(ours[..., cols], q[..., cols])


def test_is_the_proportional_rope_type_and_rope_at_p_one():
    q = torch.randn(1, 2, 6, 16)
    p_rope = posenc.create(
        "p_rope", head_dim=16, p=0.75, scaling={"rope_type": "proportional", "factor": 2.0}
    )
    same = posenc.create(
        "rope", head_dim=16, partial_rotary_factor=0.75,
        scaling={"rope_type": "proportional", "factor": 2.0},
    )  # fmt: skip
    assert torch.equal(p_rope(q, q)[0], same(q, q)[0])
    full = posenc.create("p_rope", head_dim=16, p=1.0)
    assert torch.equal(full(q, q)[0], posenc.create("rope", head_dim=16)(q, q)[0])
    assert "proportional" in posenc.info("p_rope").formula


def test_matches_transformers_proportional_frequencies():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=2, head_dim=32,
        rope_parameters={"rope_type": "proportional", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5},
    )  # fmt: skip
    theirs, factor = ROPE_INIT_FUNCTIONS["proportional"](config)
    ours = posenc.create("p_rope", head_dim=32, p=0.5)
    assert factor == 1.0 and ours.attention_factor(None) == 1.0
    # float32 powers against float64: relative 2^-24 per frequency, a few roundings
    torch.testing.assert_close(ours.inv_freq().float(), theirs, atol=0, rtol=4 * 2**-24)
    assert int((theirs == 0).sum()) == int((ours.inv_freq() == 0).sum()) == 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"p": 0.0}, "p must be > 0"),
        ({"p": 1.5}, r"p must be in \(0, 1\]"),
        ({"p": 0.5, "scaling": {"rope_type": "linear", "factor": 2.0}}, "proportional one"),
        ({"p": 0.5, "partial_rotary_factor": 0.25}, "conflicts with p=0.5"),
        ({"p": 0.3}, r"p=0.3 of head_dim=32 rotates .* = 9 dimensions"),  # no whole pairs
    ],
)
def test_bad_input_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        posenc.create("p_rope", head_dim=32, **kwargs)


def test_a_config_round_trips():
    enc = posenc.create("p_rope", head_dim=16, p=0.5, base=500.0)
    again = posenc.create("p_rope", **enc.config.to_dict())
    assert again.config == enc.config and enc.config.rotary_dim == 8
