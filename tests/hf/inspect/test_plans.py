"""The extension plans of an inspection report: what extend_context would write for each
method and the RoPE that gives, and when there is none.
"""

import copy

import pytest

from posenc.hf import (
    EXTEND_METHODS,
    extend_context,
    inspect_checkpoint,
    render_report,
    rope_from_hf_config,
)
from posenc.rotary.mrope import MRoPE

transformers = pytest.importorskip("transformers")
from tests.hf.inspect.checkpoints import (  # noqa: E402
    tiny_llama,
)

T = transformers


def test_plans_equal_extend_context(tmp_path):
    config = tiny_llama()
    config.save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path, target=64)
    assert [p.method for p in report.extensions] == list(EXTEND_METHODS)
    for plan in report.extensions:
        assert plan.factor == 4.0 and plan.note == ""
        model = T.LlamaForCausalLM(copy.deepcopy(config))
        extend_context(model, plan.method, plan.factor)
        for key, value in plan.updates.items():
            assert getattr(model.config, key) == value, (plan.method, key)
        # the plan's encoding is the extended model's
        assert plan.rope.config == rope_from_hf_config(model.config).config
    ntk = report.extensions[EXTEND_METHODS.index("ntk")]
    assert ntk.rope.config.base == pytest.approx(10000.0 * 4.0 ** (16 / 14))


def test_a_scaled_checkpoint_is_offered_its_own_scaling_and_a_short_target_nothing(tmp_path, saved):
    """Llama 3.1 (llama3, factor 8 over 8,192, 131,072 positions) asked for 262,144: one
    plan, llama3 at factor 16 over the same 8,192, its base kept; within its 131,072 none."""
    llama = inspect_checkpoint(saved["llama-3.1-8b"], target=262144)
    (plan,) = llama.extensions
    assert (plan.method, plan.factor) == ("llama3", 2.0)
    params = plan.updates["rope_parameters"]
    assert (params["factor"], params["rope_theta"]) == (16.0, 500000.0)
    assert params["original_max_position_embeddings"] == 8192
    assert plan.updates["max_position_embeddings"] == 262144
    within = inspect_checkpoint(saved["llama-3.1-8b"], target=100000)
    assert within.extensions == () and "within the 131072 tokens" in within.extension_note
    scaled = tiny_llama(16, {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="extend it with method='linear'"):
        extend_context(T.LlamaForCausalLM(scaled), "yarn", 2.0)
    short = inspect_checkpoint(saved["mistral-7b"], target=32768)
    assert short.extensions == () and "within the original context 32768" in short.extension_note


def test_legacy_gpt_neox_plans_use_its_base_and_rotary_fraction(tmp_path, legacy):
    report = inspect_checkpoint(legacy("gpt-neox-20b", rotary_emb_base=20000), 8192)
    f = report.rotary
    assert (f.head_dim, f.rotary_dim, f.base) == (96, 24, 20000.0)
    plans = {p.method: p for p in report.extensions}
    assert set(plans) == set(EXTEND_METHODS)
    for plan in plans.values():  # every plan keeps the partial rotary and the base
        assert plan.updates["rope_parameters"]["partial_rotary_factor"] == 0.25
        assert plan.rope.config.rotary_dim == 24
    # NTK: base * factor^(d / (d - 2)) with d the rotary dims (24), not the head (96)
    expected = 20000.0 * 4.0 ** (24 / 22)
    assert plans["ntk"].updates["rope_parameters"]["rope_theta"] == pytest.approx(expected)
    assert plans["yarn"].updates["rope_parameters"]["rope_theta"] == 20000


def test_legacy_qwen2_vl_mrope_type_is_unscaled_and_keeps_its_sections(tmp_path, legacy):
    report = inspect_checkpoint(legacy("qwen2-vl-7b"), target=65536)
    f = report.rotary
    assert report.encoding == "mrope" and f.rope_type == "default"
    assert f.mrope_section == (16, 24, 24) and f.base == 1e6 and f.original_context == 32768
    # dynamic is not offered: posenc's M-RoPE takes no length-dependent scaling, and a plan
    # is only what rope_from_hf_config reads
    assert [p.method for p in report.extensions] == [m for m in EXTEND_METHODS if m != "dynamic"]
    assert "no plan for dynamic: posenc.hf.rope_from_hf_config cannot read" in (
        report.extension_note
    )
    for plan in report.extensions:
        assert plan.factor == 2.0
        assert plan.updates["rope_parameters"]["mrope_section"] == [16, 24, 24]
    ntk = report.extensions[EXTEND_METHODS.index("ntk")]
    assert isinstance(ntk.rope, MRoPE) and ntk.rope.config.mrope_section == (16, 24, 24)
    assert ntk.rope.config.base == pytest.approx(1e6 * 2.0 ** (128 / 126))


def test_a_refused_plan_is_a_note_not_an_error(tmp_path, monkeypatch, legacy):
    import posenc.hf.inspect.plans as inspect_module

    real = inspect_module.extension_updates

    def refuse_yarn(config, method, factor):
        if method == "yarn":
            raise ValueError("yarn refused for the test")
        return real(config, method, factor)

    monkeypatch.setattr(inspect_module, "extension_updates", refuse_yarn)
    report = inspect_checkpoint(legacy("llama-3.1-8b", rope_scaling=None), 262144)
    assert [p.method for p in report.extensions] == [m for m in EXTEND_METHODS if m != "yarn"]
    assert "no plan for yarn: yarn refused for the test" in report.extension_note
    assert "yarn refused for the test" in "\n".join(render_report(report, width=1000))
