"""posenc inspect: a checkpoint's config.json read into posenc's encoding, the extension
plans, the frequencies figure and the command.

The configs are built with transformers' config classes and the values of the real
checkpoints, then written by ``save_pretrained`` (no downloads). Phi-3-mini-128k's
LongRoPE factors are plausible stand-ins of the right length (48 each), not Microsoft's.
"""

import copy
import json
import math

import pytest
import torch

import posenc
from posenc.hf import (
    EXTEND_METHODS,
    extend_context,
    frequencies_figure,
    inspect_checkpoint,
    render_report,
    rope_from_hf_config,
)
from posenc.rotary.mrope import MRoPE

transformers = pytest.importorskip("transformers")
T = transformers

PHI3_SHORT = [round(1.0 + 0.002 * i * i / 48, 5) for i in range(48)]
PHI3_LONG = [round(1.0 + 46.0 * (i / 47) ** 2, 4) for i in range(48)]


def real_configs():
    """name -> a transformers config with the real checkpoint's position-related values."""
    return {
        "llama-3.1-8b": T.LlamaConfig(
            hidden_size=4096,
            num_attention_heads=32,
            num_key_value_heads=8,
            max_position_embeddings=131072,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
                "rope_theta": 500000.0,
            },
        ),
        "qwen2-7b": T.Qwen2Config(
            hidden_size=3584,
            num_attention_heads=28,
            num_key_value_heads=4,
            max_position_embeddings=131072,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        "qwen2-vl-7b": T.Qwen2VLConfig(
            text_config={
                "hidden_size": 3584,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "max_position_embeddings": 32768,
                "rope_parameters": {
                    "rope_type": "default",
                    "mrope_section": [16, 24, 24],
                    "rope_theta": 1000000.0,
                },
            }
        ),
        "qwen2.5-omni-7b": T.Qwen2_5OmniConfig(
            thinker_config={
                "position_id_per_seconds": 25,
                "seconds_per_chunk": 2,
                "text_config": {
                    "hidden_size": 3584,
                    "num_attention_heads": 28,
                    "num_key_value_heads": 4,
                    "max_position_embeddings": 32768,
                    "rope_parameters": {
                        "rope_type": "default",
                        "mrope_section": [16, 24, 24],
                        "rope_theta": 1000000.0,
                    },
                },
            }
        ),
        "qwen3-omni-30b-a3b": T.Qwen3OmniMoeConfig(
            thinker_config={
                "position_id_per_seconds": 13,
                "text_config": {
                    "head_dim": 128,
                    "hidden_size": 2048,
                    "num_attention_heads": 32,
                    "max_position_embeddings": 65536,
                    "rope_parameters": {
                        "rope_type": "default",
                        "mrope_interleaved": True,
                        "interleaved": True,
                        "mrope_section": [24, 20, 20],
                        "rope_theta": 1000000.0,
                    },
                },
            }
        ),
        "mistral-7b": T.MistralConfig(
            hidden_size=4096,
            num_attention_heads=32,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        "phi-3-mini-128k": T.Phi3Config(
            hidden_size=3072,
            num_attention_heads=32,
            max_position_embeddings=131072,
            original_max_position_embeddings=4096,
            rope_parameters={
                "rope_type": "longrope",
                "short_factor": PHI3_SHORT,
                "long_factor": PHI3_LONG,
                "rope_theta": 10000.0,
            },
        ),
        "deepseek-v3": T.DeepseekV3Config(
            max_position_embeddings=163840,
            qk_rope_head_dim=64,
            rope_parameters={
                "rope_type": "yarn",
                "factor": 40.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 4096,
                "rope_theta": 10000.0,
            },
        ),
        "gpt-neox-20b": T.GPTNeoXConfig(
            hidden_size=6144, num_attention_heads=64, rotary_pct=0.25, max_position_embeddings=2048
        ),
        "bloom-176b": T.BloomConfig(hidden_size=14336, n_head=112),
        "t5-small": T.T5Config(
            d_model=512,
            num_heads=8,
            relative_attention_num_buckets=32,
            relative_attention_max_distance=128,
        ),
        "gpt2": T.GPT2Config(n_positions=1024, n_embd=768, n_head=12),
    }


#: read by hand from the configs above: encoding, head_dim, rotary dims, base, layout,
#: rope_type, original context, extended context
ROTARY = {
    "llama-3.1-8b": ("rope", 128, 128, 500000.0, "half", "llama3", 8192, 131072),
    "qwen2-7b": ("rope", 128, 128, 1e6, "half", "default", 131072, None),
    "qwen2-vl-7b": ("mrope", 128, 128, 1e6, "half", "default", 32768, None),
    "qwen2.5-omni-7b": ("mrope", 128, 128, 1e6, "half", "default", 32768, None),
    "qwen3-omni-30b-a3b": ("mrope", 128, 128, 1e6, "half", "default", 65536, None),
    "mistral-7b": ("rope", 128, 128, 10000.0, "half", "default", 32768, None),
    "phi-3-mini-128k": ("rope", 96, 96, 10000.0, "half", "longrope", 4096, 131072),
    "deepseek-v3": ("rope", 64, 64, 10000.0, "interleaved", "yarn", 4096, 163840),
    "gpt-neox-20b": ("rope", 96, 24, 10000.0, "half", "default", 2048, None),
}
OTHER = {
    "bloom-176b": ("alibi", {"n_heads": 112}),
    "t5-small": (
        "t5",
        {"n_heads": 8, "num_buckets": 32, "max_distance": 128, "bidirectional": True},
    ),
    "gpt2": ("learned", {"dim": 768, "max_positions": 1024}),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> the directory its config.json was saved to."""
    out = {}
    for name, config in real_configs().items():
        folder = tmp_path_factory.mktemp(name)
        config.save_pretrained(folder)
        out[name] = folder
    return out


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


def tiny_llama(original=16, rope_parameters=None):
    return T.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=original,
        rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": 10000.0},
    )


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


def test_scaled_and_short_targets_have_no_plans(tmp_path, saved):
    llama = inspect_checkpoint(saved["llama-3.1-8b"], target=262144)
    assert llama.extensions == ()
    assert "already scaled ('llama3', to 131072 tokens)" in llama.extension_note
    scaled = tiny_llama(16, {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="already uses 'linear'"):  # as the note says
        extend_context(T.LlamaForCausalLM(scaled), "yarn", 2.0)
    short = inspect_checkpoint(saved["mistral-7b"], target=32768)
    assert short.extensions == () and "within the original context 32768" in short.extension_note


def lines_of(fig):
    (ax,) = fig.axes
    return {
        line.get_label(): line.get_ydata() for line in ax.get_lines() if line.get_label()[0] != "_"
    }


def test_figure_draws_the_checkpoint_and_its_plans(saved, tmp_path):
    pytest.importorskip("matplotlib")
    report = inspect_checkpoint(saved["gpt-neox-20b"], target=8192)
    drawn = lines_of(frequencies_figure(report))
    ropes = {"checkpoint (none)": report.rotary.rope}
    ropes.update({f"{p.method} (plan)": p.rope for p in report.extensions})
    assert set(drawn) == set(ropes)
    for label, rope in ropes.items():
        expected = (2 * math.pi / rope.inv_freq(8192)).numpy()
        assert len(drawn[label]) == 12  # 24 rotary dims: 12 pairs
        assert torch.allclose(torch.as_tensor(drawn[label]), torch.as_tensor(expected), rtol=0)
    # a scaled checkpoint without a target: its own scaling at its extended length
    phi = inspect_checkpoint(saved["phi-3-mini-128k"])
    drawn = lines_of(frequencies_figure(phi))
    expected = 2 * math.pi / phi.rotary.rope.inv_freq(131072)
    assert torch.equal(torch.as_tensor(drawn["checkpoint (longrope)"]), expected)
    path = posenc.plot.save(frequencies_figure(phi), tmp_path / "phi.png")
    assert path.stat().st_size > 0


def test_figure_refuses_what_it_cannot_draw(saved):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="rotary checkpoints; 'gpt2' uses learned"):
        frequencies_figure(inspect_checkpoint(saved["gpt2"]))
    with pytest.raises(ValueError, match="--target"):
        frequencies_figure(inspect_checkpoint(saved["mistral-7b"]))


def test_bad_paths_and_unknown_models(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.json"):
        inspect_checkpoint(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"config\.json"):  # a directory without one
        inspect_checkpoint(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json.*not JSON"):
        inspect_checkpoint(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"list\.json.*list"):
        inspect_checkpoint(tmp_path / "list.json")
    (tmp_path / "bert.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=r"model_type 'bert'.*llama"):
        inspect_checkpoint(tmp_path / "bert.json")
    (tmp_path / "none.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="without model_type"):
        inspect_checkpoint(tmp_path / "none.json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 8}))
    for target in (0, 2.5, True):
        with pytest.raises(ValueError, match="target"):
            inspect_checkpoint(tmp_path, target=target)


def test_render_names_the_key_facts(saved):
    text = "\n".join(render_report(inspect_checkpoint(saved["phi-3-mini-128k"])))
    for fact in ("phi3", "longrope", "[48 values", "original context: 4096", "131072", "half"):
        assert fact in text


def run_inspect(*argv):
    from posenc.cli.app import new_app, run
    from posenc.cli.inspect import register

    app = new_app()
    register(app)
    return run(app, ["inspect", *argv])


def test_command_prints_the_facts_and_writes_the_figure(saved, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "mistral.png"
    assert run_inspect(str(saved["mistral-7b"]), "--target", "131072", "--figure", str(figure)) == 0
    out = capsys.readouterr().out
    for fact in ("mistral", "pair layout: half", "original context: 32768", "yarn (factor 4)"):
        assert fact in out
    assert figure.stat().st_size > 0 and f"figure: {figure}" in out
    assert run_inspect("--help") == 0
    assert "Example:" in capsys.readouterr().out


def test_command_errors_are_one_line(tmp_path, capsys):
    assert run_inspect(str(tmp_path / "missing")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot read") and "missing" in err[0]


@pytest.fixture
def legacy(tmp_path, hub_config):
    """A directory holding a Hub config.json (``tests/data/hub``) with changes (None: drop);
    by default ``tmp_path / name``."""

    def write(name, folder=None, **changes):
        folder = tmp_path / name if folder is None else folder
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(hub_config(name, **changes)))
        return folder

    return write


def test_legacy_llama_facts_and_scaling_line(tmp_path, legacy):
    report = inspect_checkpoint(legacy("llama-3.1-8b"))
    f = report.rotary
    assert (f.head_dim, f.base, f.rope_type) == (128, 500000.0, "llama3")
    assert (f.original_context, f.extended_context) == (8192, 131072)
    assert (f.scaling["factor"], f.scaling["low_freq_factor"]) == (8.0, 1.0)
    scaling = next(line for line in render_report(report) if line.startswith("scaling:"))
    assert "None" not in scaling and "factor=8" in scaling  # unset keys are not listed


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
    assert [p.method for p in report.extensions] == list(EXTEND_METHODS)
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
    assert "yarn refused for the test" in "\n".join(render_report(report))


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


def test_figure_of_a_scaled_checkpoint_marks_its_own_reach_not_the_target(tmp_path, legacy):
    pytest.importorskip("matplotlib")
    report = inspect_checkpoint(legacy("llama-3.1-8b"), target=262144)
    assert report.extensions == ()  # extend_context refuses a scaled model
    fig = frequencies_figure(report)
    (ax,) = fig.axes
    title = fig.texts[0].get_text() if fig.texts else ax.get_title()
    assert "8192 -> 131072" in title and "262144" not in title
    marked = sorted(
        float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_label()[0] == "_"
    )
    assert marked == [8192.0, 131072.0]
    notes = [t.get_text() for t in ax.texts]
    assert "extended context 131072" in notes and not any("262144" in n for n in notes)
    drawn = lines_of(fig)
    assert set(drawn) == {"checkpoint (llama3)", "none"}
    expected = 2 * math.pi / report.rotary.rope.inv_freq(131072)
    assert torch.equal(torch.as_tensor(drawn["checkpoint (llama3)"]), expected)


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


PLAN_CONFIGS = {  # the families, as their config classes write them (4-6 layers)
    "gemma3_text": dict(num_hidden_layers=6),
    "gemma3": dict(text_config={"num_hidden_layers": 6}),
    "llama4": dict(text_config={"num_hidden_layers": 4}),
    "gpt_oss": dict(num_hidden_layers=4),
    "cohere2": dict(num_hidden_layers=4),
    "smollm3": dict(num_hidden_layers=4),
}


@pytest.mark.parametrize("model_type", sorted(PLAN_CONFIGS))
def test_the_layer_plan_is_printed_as_layer_plan_reads_it(tmp_path, model_type, capsys):
    """Gemma 3 (its text config and the composite one, a RoPE per layer type), Llama 4
    (composite), gpt-oss, Cohere2, SmolLM3: the report holds layer_plan's plan of the
    language model and `posenc inspect` prints it as a table, one row per layer."""
    import transformers

    from posenc.hf import layer_plan

    config = transformers.AutoConfig.for_model(model_type, **PLAN_CONFIGS[model_type])
    config.save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path)
    language = config.get_text_config()
    expected = layer_plan(language)
    assert report.plan is not None and str(report.plan) == str(expected)
    assert len(report.plan) == language.num_hidden_layers
    if model_type.startswith("gemma3"):  # the full layers' RoPE, and the code says so
        assert "layer_type='full_attention'" in report.build
        full = rope_from_hf_config(language, layer_type="full_attention")
        assert report.rotary.rope.config == full.config
    assert run_inspect(str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "layer plan:" in out and str(expected).splitlines()[-1] in out


def test_an_omni_config_has_no_plan_but_its_clock(saved):
    """Qwen2.5-Omni's layers are all alike (no plan), its multimodal ids are TMRoPE's."""
    report = inspect_checkpoint(saved["qwen2.5-omni-7b"])
    assert report.plan is None and any("TMRoPE" in note for note in report.notes)


def test_a_rope_per_layer_type_is_extended_in_its_full_layers(tmp_path, capsys):
    """Gemma 3's --target plans scale rope_parameters['full_attention'] only, as
    extend_context does, and the report says so."""
    import transformers

    transformers.Gemma3TextConfig(num_hidden_layers=6).save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path, target=262144)
    assert [p.method for p in report.extensions] == list(posenc.hf.EXTEND_METHODS)
    for plan in report.extensions:
        params = plan.updates["rope_parameters"]
        assert params["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
        assert "full_attention layers only" in plan.note and plan.rope is not None
    linear = report.extensions[0]
    assert linear.rope.scaling.rope_type == "linear" and linear.rope.scaling.factor == 2.0
    assert run_inspect(str(tmp_path), "--target", "262144") == 0
    assert "rope_parameters['full_attention']={rope_theta=1e+06, rope_type='linear'" in (
        capsys.readouterr().out
    )
