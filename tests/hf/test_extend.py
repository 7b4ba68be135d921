"""extend_context against the model transformers builds for the extended config, and
extension_updates, on tiny random models (no downloads).
"""

import copy

import pytest
import torch
from torch import nn

from posenc.hf import EXTEND_METHODS, extend_context, rope_from_hf_config
from posenc.rotary import RoPE

transformers = pytest.importorskip("transformers")
from tests.hf.tiny_llama import (  # noqa: E402
    HEAD_DIM,
    SCALINGS,
    SEQ,
    llama_config,
    llama_tol,
    logits_with_posenc,
    tiny_model,
)
from transformers import AutoConfig, LlamaForCausalLM  # noqa: E402

# --- (d) extend_context ---

BASE = 10000.0


def extended(method):
    """(rope_parameters, max_position_embeddings) of a model built directly for ``method``
    at factor 4 from original length 16, and the posenc scaling that rotates the same."""
    if method == "ntk":
        rope_theta = BASE * 4.0 ** (HEAD_DIM / (HEAD_DIM - 2))
        return (
            {"rope_type": "default", "rope_theta": rope_theta},
            64,
            {"rope_type": "ntk", "factor": 4.0},
        )
    params = {"rope_type": method, "factor": 4.0, "rope_theta": BASE}
    if method == "dynamic":
        return params, 16, {**params, "original_max_position_embeddings": 16}
    if method == "linear":
        return params, 64, params
    params["original_max_position_embeddings"] = 16
    if method == "llama3":
        params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    return params, 64, params


@pytest.mark.parametrize("method", EXTEND_METHODS)
def test_extend_context_equals_the_model_built_for_it(method, tol):
    model = tiny_model(llama_config({"rope_type": "default"}, base=BASE))
    state = copy.deepcopy(model.state_dict())
    assert extend_context(model, method, 4.0) is model

    rope_parameters, max_position_embeddings, scaling = extended(method)
    assert model.config.rope_parameters == rope_parameters
    assert model.config.max_position_embeddings == max_position_embeddings
    reference = LlamaForCausalLM(
        llama_config(rope_parameters, max_position_embeddings=max_position_embeddings)
    ).eval()
    reference.load_state_dict(state)
    ids = torch.randint(0, 100, (2, SEQ))
    with torch.no_grad():
        got, expected = model(ids).logits, reference(ids).logits
    rounding = llama_tol(tol, model.config, SEQ, expected)
    torch.testing.assert_close(got, expected, **rounding)  # tables computed apart
    # and posenc's own scaling of that name rotates the same
    rope = RoPE(head_dim=HEAD_DIM, base=BASE, scaling=scaling)
    torch.testing.assert_close(logits_with_posenc(model, ids, rope), got, **rounding)


@pytest.mark.parametrize("model_type", ["gemma3_text", "olmo3"])
def test_extend_context_scales_only_the_full_layers_of_a_rope_per_layer_type(model_type):
    """Gemma 3 and OLMo 3 keep a RoPE per layer type; their long-context recipes scale the
    full-attention layers' only. extend_context scales that one, keeps the sliding one, and
    the model equals the one transformers builds from the updated config."""
    config = transformers.AutoConfig.for_model(
        model_type, hidden_size=64, intermediate_size=64, num_hidden_layers=6,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, vocab_size=50,
        max_position_embeddings=32, sliding_window=8,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    assert "full_attention" in model.config.layer_types  # the scaled layers exist
    sliding = copy.deepcopy(model.config.rope_parameters["sliding_attention"])
    ids = torch.randint(0, 50, (1, 48))
    with torch.no_grad():
        before = model(ids).logits
        extend_context(model, "linear", 4.0)
        got = model(ids).logits
        reference = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(model.config))
        reference.load_state_dict(model.state_dict())
        expected = reference.eval()(ids).logits
    params = model.config.rope_parameters
    assert params["sliding_attention"] == sliding
    assert params["full_attention"]["rope_type"] == "linear"
    assert params["full_attention"]["factor"] == 4.0
    assert torch.equal(got, expected) and not torch.allclose(got, before)
    full = rope_from_hf_config(model.config, layer_type="full_attention")
    local = rope_from_hf_config(model.config, layer_type="sliding_attention")
    assert full.scaling.rope_type == "linear" and local.scaling.rope_type == "default"


def test_extend_context_takes_scaling_keys_and_original_length(tol):
    model = tiny_model(llama_config({"rope_type": "default"}, base=BASE))
    extend_context(model, "yarn", 2.0, original_max_position_embeddings=12, beta_fast=16.0)
    assert model.config.rope_parameters == {
        "rope_type": "yarn",
        "factor": 2.0,
        "rope_theta": BASE,
        "original_max_position_embeddings": 12,
        "beta_fast": 16.0,
    }
    assert model.config.max_position_embeddings == 24
    rope = rope_from_hf_config(model.config)
    ids = torch.randint(0, 100, (1, 30))
    with torch.no_grad():
        expected = model(ids).logits
    rounding = llama_tol(tol, model.config, 30, expected)
    torch.testing.assert_close(logits_with_posenc(model, ids, rope), expected, **rounding)


@pytest.mark.parametrize(
    "method, factor, params, named",
    [
        ("ntk-by-parts", 2.0, {}, "ntk-by-parts"),
        ("default", 2.0, {}, "default"),
        ("linear", 1.0, {}, "factor"),
        ("linear", 0.5, {}, "factor"),
        ("yarn", -2.0, {}, "factor"),
        ("yarn", float("nan"), {}, "factor"),
        ("yarn", float("inf"), {}, "factor"),
        ("linear", "2", {}, "factor"),
        ("linear", True, {}, "factor"),
        ("yarn", 2.0, {"beta_fastest": 8.0}, "beta_fastest"),
        ("ntk", 2.0, {"beta_fast": 8.0}, "beta_fast"),
        ("linear", 2.0, {"low_freq_factor": 1.0}, "low_freq_factor"),
        ("llama3", 2.0, {"rope_theta": 1e6}, "rope_theta"),
        ("llama3", 2.0, {"low_freq_factor": 4.0}, "high_freq_factor"),
    ],
)
def test_extend_context_rejects_bad_input(method, factor, params, named):
    model = tiny_model(llama_config({"rope_type": "default"}))
    before = copy.deepcopy(model.config.to_dict())
    rotary = model.model.rotary_emb
    with pytest.raises(ValueError, match=named):
        extend_context(model, method, factor, **params)
    assert model.config.to_dict() == before and model.model.rotary_emb is rotary  # untouched


#: a model that ships scaled (factor 4 over 16 positions), each published scaling
SHIPPED = {
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": BASE},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": BASE},
    "yarn": {
        "rope_type": "yarn", "factor": 4.0, "rope_theta": BASE,
        "original_max_position_embeddings": 16, "beta_fast": 16.0,
    },
    "llama3": {
        "rope_type": "llama3", "factor": 4.0, "rope_theta": BASE, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
    },
}  # fmt: skip


@pytest.mark.parametrize("method", sorted(SHIPPED))
def test_a_scaled_model_extends_by_a_larger_factor_over_the_same_original(method, tol, tmp_path):
    """Llama 3.1, YaRN-scaled Qwen and DeepSeek, linear Gemma 3: the model's own scaling with
    its factor times ``factor`` over the same original length, its other keys kept; the
    config saves, loads and reads back, and the logits are those of the model transformers
    builds for it."""
    shipped = SHIPPED[method]
    model = tiny_model(llama_config(shipped, max_position_embeddings=64))
    state = copy.deepcopy(model.state_dict())
    extend_context(model, method, 2.0)
    expected = {**shipped, "factor": 8.0}
    assert model.config.rope_parameters == expected
    new_max = 64 if method == "dynamic" else 128  # dynamic starts past max_position_embeddings
    assert model.config.max_position_embeddings == new_max
    model.config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert loaded.rope_parameters == expected
    assert rope_from_hf_config(loaded).scaling.factor == 8.0
    reference = LlamaForCausalLM(llama_config(expected, max_position_embeddings=new_max)).eval()
    reference.load_state_dict(state)
    ids = torch.randint(0, 100, (2, SEQ))
    with torch.no_grad():
        got, want = model(ids).logits, reference(ids).logits
    torch.testing.assert_close(got, want, **llama_tol(tol, model.config, SEQ, want))


def test_a_scaled_model_is_refused_what_no_recipe_does():
    llama3 = tiny_model(llama_config(SHIPPED["llama3"], max_position_embeddings=64))
    with pytest.raises(ValueError, match="extend it with method='llama3'"):
        extend_context(llama3, "yarn", 2.0)
    with pytest.raises(ValueError, match="keeps its own original length"):
        extend_context(llama3, "llama3", 2.0, 32)
    explicit = {**SHIPPED["yarn"], "attention_factor": 1.2}
    with pytest.raises(ValueError, match=r"attention_factor=1\.2"):
        extend_context(tiny_model(llama_config(explicit, max_position_embeddings=64)), "yarn", 2)
    assert llama3.config.rope_parameters == SHIPPED["llama3"]  # a refusal changes nothing


def test_extend_context_rejects_scaled_and_foreign_models():
    model = tiny_model(llama_config(SCALINGS["yarn"]))
    with pytest.raises(ValueError, match="already uses 'yarn'"):
        extend_context(model, "linear", 2.0)
    with pytest.raises(ValueError, match="rotary_emb"):
        extend_context(nn.Linear(2, 2), "linear", 2.0)
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        extend_context(tiny_model(llama_config({"rope_type": "default"})), "yarn", 2.0, 0)


def test_extend_context_keeps_float32_frequencies_on_a_bfloat16_model():
    model = tiny_model(llama_config({"rope_type": "default"})).to(torch.bfloat16)
    assert model.model.rotary_emb.inv_freq.dtype == torch.bfloat16  # rounded by .to()
    extend_context(model, "linear", 2.0)
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert model.model.rotary_emb.inv_freq.device == model.lm_head.weight.device


def test_extension_updates_reads_legacy_gpt_neox_keys(hub_config):
    from posenc.hf.extend import extension_updates

    raw = hub_config("gpt-neox-20b")
    ntk = extension_updates(raw, "ntk", 4.0)["rope_parameters"]
    # NTK-aware base over the 24 rotary dims (96 * 0.25), not the whole 96-dim head
    assert ntk["rope_theta"] == pytest.approx(10000 * 4.0 ** (24 / 22))
    assert ntk["partial_rotary_factor"] == 0.25
    # the same plan as from the config transformers 5 builds from that file
    config = AutoConfig.for_model(**raw)
    assert config.rope_parameters["partial_rotary_factor"] == 0.25
    for method in EXTEND_METHODS:
        ours = extension_updates(raw, method, 4.0)["rope_parameters"]
        theirs = extension_updates(config, method, 4.0)["rope_parameters"]
        assert ours == pytest.approx(theirs), method


def test_extension_updates_treats_legacy_mrope_as_unscaled():
    from posenc.hf.extend import extension_updates

    raw = {
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    updates = extension_updates(raw, "yarn", 2.0)
    assert updates["rope_parameters"] == {
        "rope_theta": 1000000.0,
        "mrope_section": [16, 24, 24],
        "rope_type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 32768,
    }
    assert updates["max_position_embeddings"] == 65536
