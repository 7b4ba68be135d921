"""Hunyuan's NTK-alpha: ``{"rope_type": "dynamic", "alpha": a}`` is a static NTK base
``base · a^(d/(d-2))`` (transformers' Hunyuan models call it ``ntk_alpha``), not
Hugging Face's length-dependent dynamic NTK; the YaRN keys its checkpoints carry are
accepted at their neutral values only."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.hf import rope_from_hf_config

#: a Hunyuan checkpoint's rope_scaling, as its config.json writes it
HUNYUAN = {
    "rope_type": "dynamic",
    "alpha": 1000.0,
    "factor": 1.0,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "rope_theta": 10000.0,
}


def test_equals_transformers_hunyuan():
    pytest.importorskip("transformers")
    from transformers import HunYuanDenseV1Config
    from transformers.models.hunyuan_v1_dense import modeling_hunyuan_v1_dense as hunyuan

    config = HunYuanDenseV1Config(
        hidden_size=256, head_dim=64, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=1, intermediate_size=64, vocab_size=50,
        rope_parameters={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 1e4},
    )  # fmt: skip
    rotary = hunyuan.HunYuanDenseV1RotaryEmbedding(config)
    ours = rope_from_hf_config(config)
    assert ours.config.scaling.rope_type == "ntk_alpha"
    # transformers' frequencies are float32: one rounding of each
    assert_close(ours.inv_freq(), rotary.inv_freq.double(), rtol=2**-23, atol=0)
    x = torch.randn(1, 4, 7, 64)
    cos, sin = rotary(x, torch.arange(7)[None])
    theirs, _ = hunyuan.apply_rotary_pos_emb(x, x, cos, sin)
    assert_close(ours(x, x)[0], theirs, atol=1e-5, rtol=0)


def test_static_and_as_written():
    rope = posenc.create("rope", head_dim=64, scaling=HUNYUAN)
    d = 64
    base = 10000.0 * 1000.0 ** (d / (d - 2))
    expected = base ** -(torch.arange(0, d, 2, dtype=torch.float64) / d)
    assert_close(rope.inv_freq(), expected)
    assert torch.equal(rope.inv_freq(10), rope.inv_freq(10**6))  # no length dependence
    assert not rope.depends_on_length
    again = posenc.create("rope", head_dim=64, scaling=rope.config.scaling.to_dict())
    assert again.config.scaling == rope.config.scaling
    assert rope.config.scaling.to_dict()["rope_type"] == "dynamic"  # as checkpoints write it
    plain = posenc.create("rope", head_dim=64, scaling={"rope_type": "dynamic", "factor": 2.0,
                          "original_max_position_embeddings": 16})  # fmt: skip
    assert plain.depends_on_length  # without alpha: Hugging Face's dynamic NTK


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"factor": 2.0}, "factor=2.0 with alpha"),
        ({"mscale": 0.7}, "mscale=0.7 with alpha"),
        ({"alpha": 0.5}, "alpha must be >= 1"),
    ],
)
def test_keys_no_formula_reads_are_refused_unless_neutral(extra, message):
    with pytest.raises(ValueError, match=message):
        posenc.create("rope", head_dim=64, scaling={**HUNYUAN, **extra})
