"""extend_context on a tiny model of every model type the Hugging Face tests build
(``tests/hf/families.py``: the layer-plan families, Llama, Phi-3, GPT-NeoX, Qwen2.5-VL,
Gemma 3, Llama 4), for every method: what it offers saves, loads, reads back in posenc and
runs as the model transformers loads; what it refuses raises and leaves the model alone;
and `posenc inspect` offers exactly what it applies.
"""

import copy
import warnings

import pytest
import torch

from posenc.hf import (
    EXTEND_METHODS,
    extend_context,
    inspect_checkpoint,
    render_report,
    rope_from_hf_config,
)
from posenc.hf.extend import WRITTEN_ROPE_TYPE, extension_updates, scaled_layer_type
from posenc.hf.keys import config_getter

transformers = pytest.importorskip("transformers")
from tests.hf.families import CONFIGS, build, make  # noqa: E402

T = transformers
FACTOR = 4.0


def language(config):
    """The config the RoPE keys are in (a composite's text_config)."""
    return config.get_text_config()


def scaled_entry(params):
    """The RoPE dict an extension scales: the full-attention one of a per-layer-type dict."""
    return params.get("full_attention", params)


def offered(config, method):
    """Whether extension_updates (what inspect offers) takes ``method`` for ``config``."""
    try:
        extension_updates(language(config), method, FACTOR)
    except ValueError:
        return False
    return True


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("method", EXTEND_METHODS)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_what_extend_context_writes_saves_loads_and_reads_back(name, method, tmp_path):
    """Offered: the extended config saves and loads with the same RoPE, posenc reads the
    same RoPE from both, and the model runs as the one transformers builds from the saved
    config with the same weights. Refused: a ValueError, and the model unchanged."""
    model = build(make(name))
    before = copy.deepcopy(model.config.to_dict())
    rotary = {n: m for n, m in model.named_modules() if n.endswith("rotary_emb")}
    if not offered(model.config, method):
        with pytest.raises(ValueError, match=method):
            extend_context(model, method, FACTOR)
        assert model.config.to_dict() == before
        assert rotary == {n: m for n, m in model.named_modules() if n.endswith("rotary_emb")}
        return
    assert extend_context(model, method, FACTOR) is model
    text = language(model.config)
    assert scaled_entry(text.rope_parameters)["rope_type"] == WRITTEN_ROPE_TYPE[method]
    model.config.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = T.AutoConfig.from_pretrained(tmp_path)
    assert language(loaded).rope_parameters == text.rope_parameters
    assert language(loaded).max_position_embeddings == text.max_position_embeddings
    layer_type = scaled_layer_type(config_getter(text))
    ours = rope_from_hf_config(model.config, layer_type=layer_type)
    assert ours.config == rope_from_hf_config(loaded, layer_type=layer_type).config
    assert ours.scaling.rope_type == ("default" if method == "ntk" else method)
    reference = build(loaded)
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(3, 60, (1, 10))
    assert torch.equal(logits(model, ids), logits(reference, ids))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_inspect_offers_what_extend_context_applies(name, tmp_path):
    """The plans `posenc inspect --target` shows are the methods extend_context applies to
    the model the same config builds, and the "apply:" line names them; a model it applies
    none to has no "apply:" line (no report says apply and refuses)."""
    config = make(name)
    config.save_pretrained(tmp_path)
    original = language(config).max_position_embeddings
    report = inspect_checkpoint(tmp_path, target=int(FACTOR * original))
    applied = []
    for method in EXTEND_METHODS:
        try:
            extend_context(build(make(name)), method, FACTOR)
        except ValueError:
            continue
        applied.append(method)
    assert [plan.method for plan in report.extensions] == applied
    apply = [
        line for line in render_report(report, width=1000) if line.lstrip().startswith("apply:")
    ]
    if not applied:
        assert apply == []
        return
    (line,) = apply
    for method in EXTEND_METHODS:
        assert (repr(method) in line) == (method in applied), (method, line)
    assert all(plan.rope is not None for plan in report.extensions)


def test_phi3_is_offered_ntk_only_and_refuses_the_others_by_name(tmp_path):
    """Phi-3's config class takes rope_type default and longrope only: of the five methods,
    NTK-aware (a larger base, rope_type default) is the one whose config saves. The report
    says so in one line and its apply line names ntk."""
    T.Phi3Config(max_position_embeddings=4096).save_pretrained(tmp_path)
    report = inspect_checkpoint(tmp_path, target=131072)
    assert [plan.method for plan in report.extensions] == ["ntk"]
    assert report.extension_note.startswith("no plan for linear, dynamic, yarn, llama3: ")
    assert "'default' or 'longrope'" in report.extension_note
    text = "\n".join(render_report(report, width=1000))
    assert "apply: posenc.hf.extend_context(model, 'ntk', 32)" in text
    assert "cannot build" not in text and "METHOD" not in text
    model = build(make("phi3"))
    with pytest.raises(ValueError, match=r"'yarn'.*'phi3' takes rope_type 'default' or 'longr"):
        extend_context(model, "yarn", 4.0)
    assert model.config.rope_parameters["rope_type"] == "default"


def test_a_head_dim_of_none_is_written_for_dynamic_and_yarn():
    """Mixtral's config holds head_dim=None, on which transformers' dynamic and YaRN
    initialisers fail: extend_context writes the size its attention uses, and refuses to
    guess it for a config.json of a class whose default is a number of its own."""
    model = build(make("mixtral"))
    assert model.config.head_dim is None
    extend_context(model, "yarn", FACTOR)
    attention = model.model.layers[0].self_attn
    assert model.config.head_dim == attention.head_dim == 64 // 4
    assert "head_dim" not in extension_updates(make("mixtral"), "linear", FACTOR)
    gemma = {"model_type": "gemma2", "hidden_size": 64, "num_attention_heads": 4}
    gemma |= {"max_position_embeddings": 64, "rope_theta": 1e4}
    with pytest.raises(ValueError, match="no head_dim"):
        extension_updates(gemma, "dynamic", FACTOR)


def test_a_nested_language_model_is_refused_by_name(saved):
    """Qwen2.5-Omni keeps its language model in thinker_config.text_config, beside a talker
    with a RoPE of its own: extend_context refuses it, and inspect shows its plans with the
    refusal in place of the apply line."""
    from posenc.hf.extend import extend_refusal

    assert "config.thinker_config.text_config" in extend_refusal(T.Qwen2_5OmniConfig())
    assert extend_refusal(make("qwen2_5_vl")) is None
    report = inspect_checkpoint(saved["qwen2.5-omni-7b"], target=65536)
    lines = render_report(report, width=1000)
    assert report.extensions and not any("apply:" in line for line in lines)
    assert any(line.startswith("    extend_context refuses this model: ") for line in lines)
