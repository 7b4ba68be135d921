"""``posenc inspect``: the facts printed, the figure written, the layer plan as layer_plan
reads it, and errors in one line.
"""

import pytest

import posenc
from posenc.hf import (
    inspect_checkpoint,
    rope_from_hf_config,
)

transformers = pytest.importorskip("transformers")

T = transformers


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
    language model and `posenc inspect` prints it as a table, one row per kind of layer."""
    import transformers

    from posenc.hf import layer_plan
    from posenc.hf.inspect.table import plan_table

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
    table = "\n".join(f"    {line}" for line in plan_table(expected, 76))
    assert f"layer plan ({len(expected)} layers):\n{table}\n" in out


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
    out = " ".join(capsys.readouterr().out.split())  # a plan's line wraps at 80 columns
    assert "rope_parameters['full_attention']={rope_theta=1e+06, rope_type='linear'" in out
