"""Qwen2.5-1M's ``dual_chunk_attention_config`` read from a config saved with
transformers' ``Qwen2Config`` (which keeps the key without reading it): the ``dca``
encoding with the config's base, head size and chunks, a model built from the plan equal
to transformers' within one chunk (where DCA is RoPE), the refusals, ``extend_context``'s
refusal and ``posenc inspect``'s notes."""

from __future__ import annotations

import json

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.hf import extend_context, rope_from_hf_config
from posenc.hf.dca import dca_notes
from posenc.hf.inspect.checkpoint import inspect_checkpoint
from posenc.hf.inspect.view import render_report

transformers = pytest.importorskip("transformers")

QWEN_1M = {"chunk_size": 262144, "local_size": 8192, "original_max_position_embeddings": 262144}


def qwen2(tmp_path, **dca):
    config = transformers.Qwen2Config(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        intermediate_size=64, vocab_size=50, rope_theta=1e7, max_position_embeddings=1010000,
        dual_chunk_attention_config=dca or QWEN_1M,
    )  # fmt: skip
    config.save_pretrained(tmp_path)
    return transformers.Qwen2Config.from_pretrained(tmp_path)


def test_the_config_gives_dca_with_its_chunks(tmp_path):
    rope = rope_from_hf_config(qwen2(tmp_path))
    c = rope.config
    assert rope.info.name == "dca"
    assert (c.head_dim, c.base, c.layout) == (16, 1e7, "half")
    assert (c.chunk_size, c.local_size, c.original_max_position_embeddings) == (
        262144,
        8192,
        262144,
    )
    # the dict a config.json holds reads the same
    raw = json.loads((tmp_path / "config.json").read_text())
    assert rope_from_hf_config(raw).config == c


def test_within_a_chunk_the_model_equals_transformers(tmp_path):
    """transformers ignores the chunks (plain RoPE): below the first chunk boundary DCA is
    RoPE, so a tiny Qwen2 and its posenc rotation agree there."""
    config = qwen2(tmp_path, chunk_size=24, local_size=8)  # chunks of 16
    rope = rope_from_hf_config(config)
    emb = transformers.models.qwen2.modeling_qwen2.Qwen2RotaryEmbedding(config)
    x = torch.randn(1, 4, 16, 16)
    positions = torch.arange(16)
    cos, sin = emb(x, positions[None])
    theirs = (
        x * cos[:, None] + transformers.models.qwen2.modeling_qwen2.rotate_half(x) * sin[:, None]
    )
    ours, _ = rope(x, x, positions=positions)
    # transformers' angles are a float32 product (up to 16 · 2^-24 rad here)
    assert_close(ours, theirs, atol=1e-5, rtol=0)
    # and past the boundary the keys turn by their place in their chunk, not theirs
    later = rope.rotation(torch.tensor([20]))[0]
    assert_close(later, rope.rotation(torch.tensor([4]))[0])


@pytest.mark.parametrize(
    ("dca", "match"),
    [
        ({"chunk_size": 64, "local_size": 8, "chunk_overlap": 2}, "unknown key"),
        ({"local_size": 8}, "no chunk_size"),
        ({"chunk_size": 8, "local_size": 8}, "local_size"),
    ],
)
def test_bad_dual_chunk_configs_are_refused_by_name(dca, match):
    config = {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4,
              "dual_chunk_attention_config": dca}  # fmt: skip
    with pytest.raises(ValueError, match=match):
        rope_from_hf_config(config)


@pytest.mark.parametrize(
    ("dca", "error", "match"),
    [
        ([262144, 8192], TypeError, "dual_chunk_attention_config must be a dict"),
        ({"chunk_size": 64}, ValueError, "no local_size"),
        ({"chunk_size": "64", "local_size": 8}, TypeError, "chunk_size must be an int"),
        ({**QWEN_1M, "original_max_position_embeddings": 0}, ValueError,
         "original_max_position_embeddings must be >= 1"),
    ],
)  # fmt: skip
def test_the_notes_refuse_a_bad_config_by_name(dca, error, match):
    """``posenc inspect``'s notes read the sizes too: a named error, not a KeyError, and a
    length of 0 is not read as no length."""
    with pytest.raises(error, match=match):
        dca_notes(dca)


def test_a_rope_scaling_beside_the_chunks_is_refused():
    config = {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4,
              "max_position_embeddings": 4096, "dual_chunk_attention_config": QWEN_1M,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}  # fmt: skip
    with pytest.raises(ValueError, match="both dual_chunk_attention_config and rope_type 'yarn'"):
        rope_from_hf_config(config)


def test_the_sparse_prefill_keys_are_read_as_a_note(tmp_path):
    dca = {**QWEN_1M, "sparse_attention_config": [{"0": ["vertical_and_slash", 1000, 6096, 1]}],
           "sparse_attention_threshold": 32768}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4,
        "num_hidden_layers": 2, "max_position_embeddings": 1010000,
        "dual_chunk_attention_config": dca}))  # fmt: skip
    lines = render_report(inspect_checkpoint(tmp_path, target=2000000), width=1000)
    text = "\n".join(lines)
    assert lines[1] == "encoding: dca (DualChunkRoPE)"
    assert "chunks of 253952 positions" in text and "transformers ignores" in text
    assert "sparse attention" in text and "over 32768 tokens" in text
    assert "extend_context refuses this model: its dual_chunk_attention_config" in text
    assert "apply:" not in text


def test_extend_context_refuses_and_leaves_the_model(tmp_path):
    config = qwen2(tmp_path)
    model = transformers.Qwen2ForCausalLM(config)
    before = model.config.to_dict()
    with pytest.raises(ValueError, match="dual_chunk_attention_config is its context extension"):
        extend_context(model, "yarn", 4.0)
    assert model.config.to_dict() == before


def test_a_layer_plan_model_runs_dca(tmp_path):
    plan = posenc.hf.layer_plan(qwen2(tmp_path, chunk_size=24, local_size=8))
    assert {spec.encoding.info.name for spec in plan} == {"dca"}
