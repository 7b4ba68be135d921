"""DeepSeek-V4's rotary embeddings read from its config: per layer type (``main`` and
``compress``, each its own ``rope_theta``), interleaved pairs on the last
``head_dim · partial_rotary_factor`` channels of a ``[nope | rope]`` head, equal to
transformers' ``DeepseekV4RotaryEmbedding`` and ``apply_rotary_pos_emb``, and the
conjugate rotation of the attention output equal to its ``(cos, -sin)``.

Tolerance: transformers' angles are a float32 product (up to ``p·2^-24`` radians at
position p < 32 here) against posenc's float64, then a pair turned in float32."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch.testing import assert_close

from posenc.hf import rope_from_hf_config
from posenc.hf.deepseek_v4 import LABELS

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
    text = "\n".join(render_report(report, width=1000))
    assert "rotary dims 16 (partial rotary, factor 0.25: the last)" in text
    assert "layer_type='compress'" in report.build
    assert not report.extensions and "no 'full_attention' entry" in text


def test_layer_plan_is_refused_with_the_reason(config):
    """Its RoPEs are read, but its compressed attention is no posenc layer plan."""
    from posenc.hf import layer_plan

    with pytest.raises(ValueError, match=r"deepseek_v4' has no layer plan: .*compressed keys"):
        layer_plan(config)


#: a config.json as V4's checkpoints ship it: flat YaRN, qk_rope_head_dim,
#: compress_rope_theta (DeepSeek-V4-Flash's keys, its sizes made small)
FLAT = {
    "model_type": "deepseek_v4", "num_hidden_layers": 2, "hidden_size": 128,
    "num_attention_heads": 2, "head_dim": 64, "qk_rope_head_dim": 16, "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0, "max_position_embeddings": 4096,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 256,
                     "beta_fast": 32, "beta_slow": 1},
}  # fmt: skip


def _transformers_reads(as_json):
    """transformers' config object (which folds, and writes into, the dicts it is given)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(**copy.deepcopy(as_json))


def _rotations_equal(as_json, config, layer_type, length=300):
    """posenc's reading of ``as_json`` turns a head as transformers' rotary embedding of
    ``config`` does, cos and sin tables and all."""
    rope = rope_from_hf_config(as_json, layer_type=layer_type)
    x = torch.randn(1, length, 2, config.head_dim)  # [batch, seq, heads, head_dim]
    positions = torch.arange(length)
    cos, sin = v4.DeepseekV4RotaryEmbedding(config)(x, positions[None], layer_type=layer_type)
    ours = rope.rotate(x.transpose(1, 2), rope.rotation(positions)).transpose(1, 2)
    tol = {"atol": (16 + length) * EPS * 4 * x.abs().max().item(), "rtol": 0}
    assert_close(ours, v4.apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=2), **tol)
    return rope


@pytest.mark.parametrize("layer_type", ["main", "compress"])
def test_a_shipped_config_json_reads_as_transformers_folds_it(layer_type):
    """main: qk_rope_head_dim channels at rope_theta, no scaling; compress: at
    compress_rope_theta with the flat YaRN, attention factor 1 (issue 52)."""
    rope = _rotations_equal(FLAT, _transformers_reads(FLAT), layer_type)
    c = rope.config
    assert (c.rotary_dim, c.rotary_at, c.layout) == (16, "end", "interleaved")
    if layer_type == "main":
        assert c.base == 10000.0 and rope.scaling.rope_type == "default"
    else:
        assert c.base == 160000.0 and rope.scaling.rope_type == "yarn"
        assert rope.attention_factor() == 1.0


@pytest.mark.parametrize(
    "change",
    [
        {"rope_scaling": None},  # no scaling: qk_rope_head_dim still read
        {"qk_rope_head_dim": None, "partial_rotary_factor": 0.5},
        {"rope_scaling": None, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
        {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        {"rope_scaling": {**FLAT["rope_scaling"], "attention_factor": 1.5}},
    ],
)
def test_every_flat_form_reads_as_transformers_folds_it(change):
    as_json = {k: v for k, v in {**FLAT, **change}.items() if v is not None}
    config = _transformers_reads(as_json)
    for layer_type in ("main", "compress"):
        _rotations_equal(as_json, config, layer_type)


def test_a_folded_dict_without_its_rotary_fraction_takes_the_configs():
    """Per-label dicts without partial_rotary_factor take the config's (qk_rope_head_dim /
    head_dim), as transformers' standardize_rope_params fills them in for its YaRN."""
    as_json = {**FLAT, "rope_scaling": None, "rope_parameters": {
        "main": {"rope_type": "default"},
        "compress": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    }}  # fmt: skip
    config = _transformers_reads(as_json)
    assert _rotations_equal(as_json, config, "compress").config.rotary_dim == 16


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        (("head_dim",), {"head_dim": 512, "rotary_dim": 16}),
        (("qk_rope_head_dim",), {"rotary_dim": 8}),  # 64 / 512 of a 64-wide head
        (("head_dim", "qk_rope_head_dim"), {"head_dim": 512, "rotary_dim": 64}),
        (("rope_theta",), {"main": 10000.0}),
        (("compress_rope_theta",), {"compress": 160000.0}),
        (("head_dim", "qk_rope_head_dim", "rope_theta", "compress_rope_theta", "rope_scaling"),
         {"head_dim": 512, "rotary_dim": 64, "main": 10000.0, "compress": 160000.0}),
    ],
)  # fmt: skip
def test_a_key_left_out_is_the_classs_default(missing, expected):
    """A config.json without a key reads as DeepseekV4Config fills it (its class default is
    the model's definition: head_dim 512, not hidden / heads), equal to transformers'
    rotations of the config it builds from the same dict (issue 52)."""
    as_json = {k: v for k, v in FLAT.items() if k not in missing}
    config = _transformers_reads(as_json)
    for layer_type in LABELS:
        c = _rotations_equal(as_json, config, layer_type).config
        assert c.head_dim == expected.get("head_dim", 64) == config.head_dim
        assert c.rotary_dim == expected.get("rotary_dim", 16) == config.qk_rope_head_dim
        assert c.base == expected.get(layer_type, c.base)


def test_a_nested_config_without_a_base_takes_the_classs():
    """Per-label dicts with no rope_theta, nor one at the top level: both at the class's
    10000, as transformers fills them (compress_rope_theta is read by flat configs only)."""
    as_json = {k: v for k, v in FLAT.items() if k not in ("rope_theta", "rope_scaling")}
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    own = {"partial_rotary_factor": 0.25}
    as_json["rope_parameters"] = {
        "main": {"rope_type": "default", **own},
        "compress": {**yarn, **own},
    }
    config = _transformers_reads(as_json)
    for layer_type in LABELS:
        assert _rotations_equal(as_json, config, layer_type).config.base == 10000.0


def test_no_layer_type_names_the_two_ropes():
    with pytest.raises(ValueError, match=r"\['main', 'compress'\]\): pass layer_type"):
        rope_from_hf_config(FLAT)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"partial_rotary_factor": 0.5}, "qk_rope_head_dim=16 and partial_rotary_factor"),
        ({"qk_rope_head_dim": 128}, "qk_rope_head_dim must be <= 64"),
        ({"qk_rope_head_dim": 15}, "qk_rope_head_dim must be even"),
        ({"rope_scaling": {**FLAT["rope_scaling"], "rope_theta": 5.0}}, "rope_theta=5.0"),
        ({"rope_scaling": {"main": {"rope_type": "default"}}}, "'main' only"),
    ],
)
def test_what_contradicts_or_transformers_would_drop_is_refused_by_name(change, match):
    as_json = {k: v for k, v in {**FLAT, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        rope_from_hf_config(as_json, layer_type="main")


def test_a_config_key_of_the_wrong_type_is_named():
    with pytest.raises(TypeError, match="qk_rope_head_dim must be an int"):
        rope_from_hf_config({**FLAT, "qk_rope_head_dim": "16"}, layer_type="main")
    with pytest.raises(TypeError, match="compress_rope_theta must be a number"):
        rope_from_hf_config({**FLAT, "compress_rope_theta": "1e5"}, layer_type="compress")
