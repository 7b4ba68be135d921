"""The rope types each model type's config class takes (``ModelType.rope_types``), derived
again from the transformers installed: for every rotary model type it can build by
default, each rope type extend_context writes is put in the config as extend_context puts
it and the config is built, written as JSON and loaded by its own class; the record's
list is right exactly when that round trip keeps the type."""

import json
import warnings

import pytest

from posenc.hf.extend import (
    EXTEND_METHODS,
    WRITTEN_ROPE_TYPE,
    extension_updates,
    rope_type_refusal,
    scaled_layer_type,
)
from posenc.hf.keys import config_getter
from posenc.hf.records import MODEL_TYPES

transformers = pytest.importorskip("transformers")

#: what each written rope type carries beside its type (a factor of 4 from 64 tokens)
_SCALING = {
    "linear": {"factor": 4.0},
    "dynamic": {"factor": 4.0},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 64},
    "llama3": {"factor": 4.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0}
    | {"high_freq_factor": 4.0},
}


def default_text_config(model_type):
    """The language model's config of ``model_type``'s default config, or None where the
    installed transformers cannot build one, it has no ``rope_parameters``, or
    extend_context would not pick the layer type to scale (a per-layer dict without
    full_attention: Zaya)."""
    if model_type not in transformers.CONFIG_MAPPING:
        return None
    try:
        config = transformers.CONFIG_MAPPING[model_type]()
    except Exception:  # a config class that needs arguments: not derivable here
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not hasattr(text, "rope_parameters"):  # GPT-J, CodeGen: nothing to write into
        return None
    try:
        scaled_layer_type(config_getter(text))
    except ValueError:
        return None
    return text


def takes(text, rope_type) -> bool:
    """Whether ``text``'s class takes ``rope_type`` written as extend_context writes it:
    the config built from its dict with the type in (its full-attention entry), its JSON
    loaded again, the type kept."""
    params = dict(text.rope_parameters or {})
    scaling = {"rope_type": rope_type, **_SCALING.get(rope_type, {})}
    if isinstance(params.get("full_attention"), dict):
        full = {k: v for k, v in params["full_attention"].items() if k == "rope_theta"}
        params["full_attention"] = {**full, **scaling}
    else:
        kept = ("rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved")
        params = {**{k: v for k, v in params.items() if k in kept}, **scaling}
    raw = {**text.to_dict(), "rope_parameters": params}
    raw.pop("rope_scaling", None)
    try:
        built = type(text).from_dict(raw)
        loaded = type(text).from_dict(json.loads(built.to_json_string()))
    except Exception:  # the class refuses it, whatever it raises
        return False
    loaded_params = loaded.rope_parameters
    if isinstance(loaded_params.get("full_attention"), dict):
        loaded_params = loaded_params["full_attention"]
    return loaded_params.get("rope_type") == rope_type


def test_every_record_is_what_its_config_class_takes():
    """For each rotary model type the installed transformers builds, the rope types
    extend_context may write (those the record does not exclude) are exactly those its
    config class takes. A class whose JSON does not load again even unscaled (Bamba,
    Falcon-H1, GraniteMoeHybrid: an infinite ``time_step_limit`` written as an object) is
    left out: its round trip says nothing of RoPE."""
    derived, wrong = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, record in MODEL_TYPES.items():
            text = None if not record.rotary else default_text_config(name)
            if text is None or not takes(text, "default"):
                continue
            derived += 1
            for method in EXTEND_METHODS:
                allowed = rope_type_refusal(name, method) is None
                if allowed != takes(text, WRITTEN_ROPE_TYPE[method]):
                    wrong.append((name, method, "record allows" if allowed else "record refuses"))
    assert not wrong, f"records that disagree with the config classes: {wrong}"
    assert derived >= 200, f"only {derived} model types could be derived"


def test_every_restricted_record_is_read_off_a_class():
    """A record with rope_types names a model type transformers has, whose config class
    refuses at least one type extend_context writes (no restriction kept for nothing)."""
    restricted = {n: r.rope_types for n, r in MODEL_TYPES.items() if r.rope_types is not None}
    assert {"phi3", "phi4_multimodal", "phimoe"} <= set(restricted)
    for name, rope_types in restricted.items():
        assert "default" in rope_types, name
        refused = [m for m in EXTEND_METHODS if rope_type_refusal(name, m) is not None]
        assert refused, name


@pytest.mark.parametrize("method", [m for m in EXTEND_METHODS if m != "ntk"])
def test_extension_updates_refuses_a_type_the_class_does_not_take(method):
    phi3 = {"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4}
    phi3 |= {"max_position_embeddings": 64, "rope_theta": 1e4}
    with pytest.raises(ValueError, match=rf"method '{method}' writes rope_type '{method}'.*phi3"):
        extension_updates(phi3, method, 4.0)
    ntk = extension_updates(phi3, "ntk", 4.0)["rope_parameters"]
    assert ntk["rope_type"] == "default" and ntk["rope_theta"] > 1e4
