"""posenc.hf.inspect_checkpoint: a checkpoint's config.json read into posenc's encoding
(rotary, ALiBi, T5 buckets, learned), its facts and notes, and what it refuses.
"""

import json
import math

import pytest
import torch

import posenc
from posenc.hf import (
    inspect_checkpoint,
    render_report,
    rope_from_hf_config,
)
from posenc.rotary.mrope import MRoPE

transformers = pytest.importorskip("transformers")
from tests.hf.inspect.checkpoints import (  # noqa: E402
    OTHER,
    PHI3_LONG,
    PHI3_SHORT,
    ROTARY,
)

T = transformers


@pytest.mark.parametrize("name", sorted(ROTARY))
def test_rotary_checkpoints(name, saved):
    report = inspect_checkpoint(saved[name])
    encoding, head_dim, rotary_dim, base, layout, rope_type, original, extended = ROTARY[name]
    f = report.rotary
    assert (report.encoding, f.head_dim, f.rotary_dim, f.base, f.layout) == (
        encoding,
        head_dim,
        rotary_dim,
        base,
        layout,
    )
    assert (f.rope_type, f.original_context, f.extended_context) == (rope_type, original, extended)
    # the encoding is rope_from_hf_config's of the same file: the same function, exactly
    raw = json.loads((saved[name] / "config.json").read_text())
    expected = rope_from_hf_config(raw)
    assert f.rope.config == expected.config
    length = extended or original
    assert torch.equal(f.rope.inv_freq(length), expected.inv_freq(length))
    assert f.attention_factor == expected.attention_factor(length)
    assert f.longest_wavelength == pytest.approx(2 * math.pi / expected.inv_freq(length).min())
    assert report.path == saved[name] / "config.json"
    # the build code in the report runs and builds the same encoding
    scope = {"json": json, "posenc": posenc}
    exec(report.build, scope)
    assert scope["rope"].config == f.rope.config


def test_checkpoint_specifics(saved):
    qwen = inspect_checkpoint(saved["qwen2-vl-7b"]).rotary
    assert isinstance(qwen.rope, MRoPE) and qwen.mrope_section == (16, 24, 24)
    for name, clock, family in (
        ("qwen2.5-omni-7b", "position_id_per_seconds=25, seconds_per_chunk=2", "qwen2_5_omni"),
        ("qwen3-omni-30b-a3b", "position_id_per_seconds=13", "qwen3_omni_moe"),
    ):
        omni = inspect_checkpoint(saved[name])
        assert omni.rotary.mrope_section == (
            (16, 24, 24) if family == "qwen2_5_omni" else (24, 20, 20)
        )
        assert omni.rotary.rope.config.mrope_interleaved == (family == "qwen3_omni_moe")
        tmrope = [note for note in omni.notes if "TMRoPE" in note]
        assert len(tmrope) == 1 and clock in tmrope[0] and repr(family) in tmrope[0]
    phi = inspect_checkpoint(saved["phi-3-mini-128k"]).rotary
    assert phi.scaling["long_factor"] == tuple(PHI3_LONG)
    assert phi.scaling["short_factor"] == tuple(PHI3_SHORT)
    assert phi.scaling["factor"] == 32.0  # 131072 / 4096
    assert phi.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    deepseek = inspect_checkpoint(saved["deepseek-v3"])
    assert (
        deepseek.rotary.layout == "interleaved" and "deepseek_v3" in deepseek.rotary.layout_reason
    )
    assert deepseek.rotary.scaling["factor"] == 40.0 and deepseek.rotary.head_dim == 64
    assert any("mscale_all_dim" in note for note in deepseek.notes)
    llama = inspect_checkpoint(saved["llama-3.1-8b"]).rotary
    assert llama.scaling["low_freq_factor"] == 1.0 and llama.scaling["high_freq_factor"] == 4.0


def test_legacy_gpt_neox_keys_are_read(legacy):
    report = inspect_checkpoint(legacy("gpt-neox-20b"))
    assert report.rotary.rotary_dim == 24
    scope = {"json": json, "posenc": posenc}
    exec(report.build, scope)  # rope_from_hf_config reads the legacy names itself
    assert scope["rope"].config == report.rotary.rope.config


@pytest.mark.parametrize("name", sorted(OTHER))
def test_non_rotary_checkpoints(name, saved):
    report = inspect_checkpoint(saved[name], target=4096)
    encoding, config = OTHER[name]
    assert (report.encoding, report.config, report.rotary) == (encoding, config, None)
    assert report.extensions == () and "RoPE only" in report.extension_note
    scope = {"posenc": posenc}
    exec(report.build, scope)
    built = scope["encoding"]
    assert type(built) is posenc.registry.get(encoding)
    for key, value in config.items():
        assert getattr(built.config, key) == value


def test_bad_paths_and_unknown_models(tmp_path):
    with pytest.raises(ValueError, match=r"cannot read path .*missing\.json"):
        inspect_checkpoint(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"config\.json"):  # a directory without one
        inspect_checkpoint(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"path .*bad\.json.*not JSON"):
        inspect_checkpoint(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"path .*list\.json.*list"):
        inspect_checkpoint(tmp_path / "list.json")
    (tmp_path / "bert.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=r"model_type 'bert'.*llama"):
        inspect_checkpoint(tmp_path / "bert.json")
    (tmp_path / "none.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="without model_type"):
        inspect_checkpoint(tmp_path / "none.json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 8}))
    for target in (0, 2**31):  # tokens: an int in [1, 2**31 - 1]
        with pytest.raises(ValueError, match="target must be"):
            inspect_checkpoint(tmp_path, target=target)
    for target in (2.5, True, "4096"):
        with pytest.raises(TypeError, match="target must be an int"):
            inspect_checkpoint(tmp_path, target=target)


def test_legacy_llama_facts_and_scaling_line(tmp_path, legacy):
    report = inspect_checkpoint(legacy("llama-3.1-8b"))
    f = report.rotary
    assert (f.head_dim, f.base, f.rope_type) == (128, 500000.0, "llama3")
    assert (f.original_context, f.extended_context) == (8192, 131072)
    assert (f.scaling["factor"], f.scaling["low_freq_factor"]) == (8.0, 1.0)
    scaling = next(
        line for line in render_report(report, width=1000) if line.startswith("scaling:")
    )
    assert "None" not in scaling and "factor=8" in scaling  # unset keys are not listed


def test_legacy_t5_defaults_are_transformers(tmp_path, legacy):
    report = inspect_checkpoint(legacy("t5-small"))
    assert report.config == {
        "n_heads": 8,
        "num_buckets": 32,
        "max_distance": 128,
        "bidirectional": True,
    }
    defaulted = [n for n in report.notes if "default" in n]
    assert defaulted == [
        "relative_attention_max_distance is not in the config: transformers' default 128 used"
    ]
    bare = inspect_checkpoint(
        legacy("t5-small", tmp_path / "bare", relative_attention_num_buckets=None)
    )
    assert bare.config["num_buckets"] == 32
    assert sum("default" in n for n in bare.notes) == 2
    # the defaults are transformers' own
    config = T.T5Config()
    assert (config.relative_attention_num_buckets, config.relative_attention_max_distance) == (
        32,
        128,
    )


def test_every_model_type_with_a_read_layout_is_inspected_as_rotary():
    """The rotary model types are the layout table's (and M-RoPE's): an interleaved family
    (Cohere) is reported with its layout, and the model types read by hand stay in."""
    from posenc.hf.inspect.model_types import ROTARY_MODEL_TYPES
    from posenc.hf.records import model_types

    laid_out = {*model_types(layout="half"), *model_types(layout="interleaved")}
    assert laid_out | set(model_types(layout="by_flag")) <= set(ROTARY_MODEL_TYPES)
    assert {"llama", "qwen2_vl", "deepseek_v3", "gpt_neox", "cohere", "glm4"} <= set(
        ROTARY_MODEL_TYPES
    )


@pytest.mark.parametrize(
    ("model_type", "config", "layout", "note"),
    [
        ("cohere", {}, "interleaved", None),
        ("olmo2", {}, "half", None),
        ("cohere2", {"num_hidden_layers": 4}, "interleaved", "3 x rope window 4096, 1 x nope"),
        ("phi3", {"sliding_window": 2047}, "half", "its layer plan is not read"),
    ],
)
def test_a_model_whose_layers_differ_says_so(tmp_path, model_type, config, layout, note):
    """Beyond the RoPE read from the top level, the report notes a plan whose layers differ
    (Cohere2's NoPE global layers) and a window it cannot read per layer (Phi-3's)."""
    import transformers

    transformers.AutoConfig.for_model(model_type, **config).save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path)
    assert report.encoding == "rope" and report.rotary.layout == layout
    notes = " ".join(report.notes)
    if note is None:
        assert "layer" not in notes
    else:
        assert note in notes


def test_an_omni_config_has_no_plan_but_its_clock(saved):
    """Qwen2.5-Omni's layers are all alike (no plan), its multimodal ids are TMRoPE's."""
    report = inspect_checkpoint(saved["qwen2.5-omni-7b"])
    assert report.plan is None and any("TMRoPE" in note for note in report.notes)
