"""``ntk_mixed``: vLLM's ``ntk`` rope type (``NTKScalingRotaryEmbedding``; NTK-RoPE-mixed,
Su 2023, kexue.fm/archives/9706), against its definition written out in float64:

- without ``mixed_b``: the base times ``s``, then every frequency divided by ``s^(2/d)``;
- with ``mixed_b`` b: ``a = ln(s) / (d/2)^b``, frequency i divided by ``exp(a·(i+1)^b)``.

A Hugging Face config's ``{"rope_type": "ntk"}`` (no transformers type) reads as this,
not as posenc's own ``ntk`` (``base · s^(d/(d-2))``), which differs between the ends."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.hf import rope_from_hf_config


def vllm_ntk(d: int, base: float, s: float, b: float | None) -> torch.Tensor:
    if b is None:
        theta = (base * s) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        return theta / s ** (2 / d)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a = math.log(s) / (d / 2) ** b
    return theta / torch.exp(a * torch.arange(1, d // 2 + 1, dtype=torch.float64) ** b)


@pytest.mark.parametrize("mixed_b", [None, 0.3, 0.625, 1.0, 2.0])
@pytest.mark.parametrize("d", [16, 64, 128])
def test_equals_vllms_definition(mixed_b, d):
    scaling = {"rope_type": "ntk_mixed", "factor": 8.0}
    if mixed_b is not None:
        scaling["mixed_b"] = mixed_b
    rope = posenc.create("rope", head_dim=d, base=500000.0, scaling=scaling)
    assert_close(rope.inv_freq(), vllm_ntk(d, 500000.0, 8.0, mixed_b), rtol=1e-12, atol=0)


def test_the_lowest_frequency_takes_the_whole_factor():
    for b in (None, 0.5):
        scaling = {"rope_type": "ntk_mixed", "factor": 4.0, "mixed_b": b}
        ours = posenc.create("rope", head_dim=32, scaling=scaling).inv_freq()
        plain = posenc.create("rope", head_dim=32).inv_freq()
        assert ours[-1] * 4 == pytest.approx(plain[-1].item(), rel=1e-12)


def test_a_config_ntk_is_vllms_not_posencs():
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
              "rope_scaling": {"rope_type": "ntk", "factor": 4.0, "mixed_b": 0.5}}  # fmt: skip
    rope = rope_from_hf_config(config)
    assert rope.scaling.rope_type == "ntk_mixed" and rope.scaling.mixed_b == 0.5
    assert_close(rope.inv_freq(), vllm_ntk(16, 10000.0, 4.0, 0.5), rtol=1e-12, atol=0)
    plain = {**config, "rope_scaling": {"rope_type": "ntk", "factor": 4.0}}
    ours = posenc.create("rope", head_dim=16, scaling={"rope_type": "ntk", "factor": 4.0})
    read = rope_from_hf_config(plain)
    assert_close(read.inv_freq(), vllm_ntk(16, 10000.0, 4.0, None), rtol=1e-12, atol=0)
    assert not torch.allclose(read.inv_freq(), ours.inv_freq())  # the two "ntk"s differ


@pytest.mark.parametrize(
    ("scaling", "match"),
    [
        ({"factor": 4.0, "mixed_b": 0.0}, "mixed_b must be > 0"),
        ({"factor": 0.5}, "factor must be >= 1"),
        ({"mixed_b": 0.5}, "missing required"),
    ],
)
def test_bad_parameters_are_refused(scaling, match):
    with pytest.raises(ValueError, match=match):
        posenc.create("rope", head_dim=16, scaling={"rope_type": "ntk_mixed", **scaling})
