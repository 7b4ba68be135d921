"""DeepSeek-V4's rotary embeddings read from its config: per layer type (``main`` and
``compress``, each its own ``rope_theta``), interleaved pairs on the last
``head_dim · partial_rotary_factor`` channels of a ``[nope | rope]`` head, equal to
transformers' ``DeepseekV4RotaryEmbedding`` and ``apply_rotary_pos_emb``, and the
conjugate rotation of the attention output equal to its ``(cos, -sin)``.

Tolerance: transformers' angles are a float32 product (up to ``p·2^-24`` radians at
position p < 32 here) against posenc's float64, then a pair turned in float32."""

from __future__ import annotations

import json

import pytest
import torch
from torch.testing import assert_close

from posenc.hf import rope_from_hf_config

v4 = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")
EPS = 2**-24


@pytest.fixture(scope="module")
def config():
    from transformers import DeepseekV4Config

    return DeepseekV4Config(
        num_hidden_layers=2, head_dim=64, qk_rope_head_dim=16, hidden_size=128,
        num_attention_heads=2,
    )  # fmt: skip


@pytest.mark.parametrize("layer_type", ["main", "compress"])
def test_each_layer_types_rotation_equals_transformers(config, layer_type):
    rope = rope_from_hf_config(config, layer_type=layer_type)
    c = rope.config
    assert (c.head_dim, c.rotary_dim, c.layout, c.rotary_at) == (64, 16, "interleaved", "end")
    assert c.base == config.rope_parameters[layer_type]["rope_theta"]
    x = torch.randn(2, 30, 2, 64)  # [batch, seq, heads, head_dim], as V4 lays it out
    cos, sin = v4.DeepseekV4RotaryEmbedding(config)(
        x, torch.arange(30)[None], layer_type=layer_type
    )
    rotation = rope.rotation(torch.arange(30))
    tol = {"atol": (16 + 30) * EPS * 2 * x.abs().max().item(), "rtol": 0}
    ours = rope.rotate(x.transpose(1, 2), rotation).transpose(1, 2)
    assert_close(ours, v4.apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=2), **tol)
    back = rope.rotate_back(x.transpose(1, 2), rotation).transpose(1, 2)
    assert_close(back, v4.apply_rotary_pos_emb(x, cos, -sin, unsqueeze_dim=2), **tol)


def test_a_config_json_reads_the_same(config):
    """From the ``config.json`` contents: the whole head, not ``qk_rope_head_dim``."""
    as_json = json.loads(config.to_json_string())
    for layer_type in ("main", "compress"):
        assert rope_from_hf_config(as_json, layer_type=layer_type).config == (
            rope_from_hf_config(config, layer_type=layer_type).config
        )


def test_inspect_reports_a_v4_checkpoint(config, tmp_path):
    """Per-layer RoPEs none of which is of full attention: the facts of the first, its
    rotary channels the last of the head, and with a target the reason nothing extends."""
    from posenc.hf.inspect import inspect_checkpoint, render_report

    config.save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path, target=4 * config.max_position_embeddings)
    text = "\n".join(render_report(report))
    assert "rotary dims 16 (partial rotary, factor 0.25: the last)" in text
    assert "layer_type='compress'" in report.build
    assert not report.extensions and "no 'full_attention' entry" in text


def test_layer_plan_is_refused_with_the_reason(config):
    """Its RoPEs are read, but its compressed attention is no posenc layer plan."""
    from posenc.hf import layer_plan

    with pytest.raises(ValueError, match=r"deepseek_v4' has no layer plan: .*compressed keys"):
        layer_plan(config)
