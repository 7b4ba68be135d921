"""rope_from_hf_config of M-RoPE models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen-Omni) against
transformers' own rotary embeddings, from trimmed config.json files of real models.
"""

import copy

import pytest
import torch

from posenc.hf import rope_from_hf_config
from posenc.rotary.mrope import MRoPE

transformers = pytest.importorskip("transformers")
from tests.hf.tiny_llama import (  # noqa: E402
    hf_table_n,
)
from transformers import AutoConfig  # noqa: E402
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (  # noqa: E402
    Qwen2_5OmniRotaryEmbedding,
)
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (  # noqa: E402
    Qwen2_5_VLRotaryEmbedding,
)
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding  # noqa: E402
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (  # noqa: E402
    Qwen3OmniMoeThinkerTextRotaryEmbedding,
)
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding  # noqa: E402

# --- (c') M-RoPE: Qwen2-VL, Qwen2.5-VL (sections), Qwen3-VL (interleaved) ---

MROPE_CONFIGS = {  # config.json of real models, trimmed to the keys that matter here
    "qwen2-vl-7b": {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "hidden_size": 3584},
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vocab_size": 152064,
    },
    "qwen2.5-vl-7b": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 128000,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vision_config": {"depth": 32, "hidden_size": 1280, "tokens_per_second": 2},
        "vocab_size": 152064,
    },
    "qwen3-vl-8b": {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "text_config": {
            "model_type": "qwen3_vl_text",
            "head_dim": 128,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_attention_heads": 32,
            "num_hidden_layers": 36,
            "num_key_value_heads": 8,
            "max_position_embeddings": 262144,
            "rope_scaling": {
                "mrope_interleaved": True,
                "mrope_section": [24, 20, 20],
                "rope_type": "default",
            },
            "rope_theta": 5000000,
            "vocab_size": 151936,
        },
        "vision_config": {"depth": 27, "hidden_size": 1152, "out_hidden_size": 4096},
    },
}

OMNI_CONFIGS = {  # Qwen-Omni: the language model inside the thinker (trimmed config.json)
    "qwen2.5-omni-7b": {
        "architectures": ["Qwen2_5OmniModel"],
        "model_type": "qwen2_5_omni",
        "thinker_config": {
            "model_type": "qwen2_5_omni_thinker",
            "position_id_per_seconds": 25,
            "seconds_per_chunk": 2,
            "text_config": {
                "model_type": "qwen2_5_omni_text",
                "hidden_size": 3584,
                "num_attention_heads": 28,
                "num_hidden_layers": 28,
                "num_key_value_heads": 4,
                "max_position_embeddings": 32768,
                "rope_scaling": {
                    "mrope_section": [16, 24, 24],
                    "rope_type": "default",
                    "type": "default",
                },
                "rope_theta": 1000000.0,
                "use_sliding_window": False,
            },
        },
    },
    "qwen3-omni-30b-a3b": {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "thinker_config": {
            "model_type": "qwen3_omni_moe_thinker",
            "position_id_per_seconds": 13,
            "text_config": {
                "model_type": "qwen3_omni_moe_text",
                "head_dim": 128,
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "num_hidden_layers": 48,
                "num_key_value_heads": 4,
                "max_position_embeddings": 65536,
                "rope_scaling": {
                    "interleaved": True,
                    "mrope_interleaved": True,
                    "mrope_section": [24, 20, 20],
                    "rope_type": "default",
                },
                "rope_theta": 1000000,
            },
        },
    },
}
MROPE_CONFIGS.update(OMNI_CONFIGS)

MROPE_EXPECTED = {  # (head_dim, base, mrope_section, interleaved) read by hand from above
    "qwen2-vl-7b": (128, 1e6, (16, 24, 24), False),
    "qwen2.5-vl-7b": (128, 1e6, (16, 24, 24), False),
    "qwen3-vl-8b": (128, 5e6, (24, 20, 20), True),
    "qwen2.5-omni-7b": (128, 1e6, (16, 24, 24), False),
    "qwen3-omni-30b-a3b": (128, 1e6, (24, 20, 20), True),
}

MROPE_ROTARY = {
    "qwen2_vl": Qwen2VLRotaryEmbedding,
    "qwen2_5_vl": Qwen2_5_VLRotaryEmbedding,
    "qwen3_vl": Qwen3VLTextRotaryEmbedding,
    "qwen2_5_omni": Qwen2_5OmniRotaryEmbedding,
    "qwen3_omni_moe": Qwen3OmniMoeThinkerTextRotaryEmbedding,
}


def language(hf_config):
    """The language model's config of a transformers VL or Omni config."""
    return getattr(hf_config, "thinker_config", hf_config).text_config


def assert_rotates_as(mrope, hf_config):
    """posenc's cos/sin equal the model's own rotary embedding on random [3, b, s] ids (up
    to the error of transformers' float32 angles, below 64 rad: see hf_table_n)."""
    rotary = MROPE_ROTARY[hf_config.model_type](language(hf_config))
    positions = torch.randint(0, 64, (3, 2, 10))
    cos_hf, sin_hf = rotary(torch.zeros(1), positions)
    cos, sin = mrope.rotation(positions)
    n = hf_table_n(mrope.config.base)
    rounding = {"atol": n * torch.finfo(torch.float32).eps * 64, "rtol": 0.0}
    torch.testing.assert_close(torch.cat((cos, cos), dim=-1), cos_hf, **rounding)
    torch.testing.assert_close(torch.cat((sin, sin), dim=-1), sin_hf, **rounding)


@pytest.mark.parametrize("name", sorted(MROPE_CONFIGS))
def test_mrope_configs_match_transformers(name):
    raw = MROPE_CONFIGS[name]
    hf_config = AutoConfig.for_model(**copy.deepcopy(raw))
    mrope = rope_from_hf_config(copy.deepcopy(raw))
    assert isinstance(mrope, MRoPE)
    c = mrope.config
    assert (c.head_dim, c.base, c.mrope_section, c.mrope_interleaved) == MROPE_EXPECTED[name]
    assert c.layout == "half" and c.scaling.rope_type == "default"
    assert rope_from_hf_config(hf_config).config == c  # the config object reads the same
    assert rope_from_hf_config(language(hf_config)).config == c  # and its text config
    assert_rotates_as(mrope, hf_config)


def test_mrope_default_section_is_transformers_default():
    """Without mrope_section, transformers uses the model's published split."""
    for name, section in (("qwen2-vl-7b", (16, 24, 24)), ("qwen3-vl-8b", (24, 20, 20))):
        raw = copy.deepcopy(MROPE_CONFIGS[name])
        params = raw.get("text_config", raw)["rope_scaling"]
        del params["mrope_section"]
        hf_config = AutoConfig.for_model(**copy.deepcopy(raw))
        mrope = rope_from_hf_config(raw)
        assert mrope.config.mrope_section == section
        assert_rotates_as(mrope, hf_config)
    # a split that does not fit the head is an error, not a silent truncation
    small = {**copy.deepcopy(MROPE_CONFIGS["qwen2-vl-7b"]), "num_attention_heads": 224}
    with pytest.raises(ValueError, match="sums to 64, but there are 8 rotary pairs"):
        rope_from_hf_config(small)


def test_mrope_with_a_scaling():
    raw = copy.deepcopy(MROPE_CONFIGS["qwen2.5-vl-7b"])
    raw["rope_scaling"] = {"rope_type": "linear", "factor": 2.0, "mrope_section": [16, 24, 24]}
    hf_config = AutoConfig.for_model(**copy.deepcopy(raw))
    mrope = rope_from_hf_config(raw)
    assert mrope.scaling.rope_type == "linear" and mrope.config.mrope_section == (16, 24, 24)
    assert_rotates_as(mrope, hf_config)


@pytest.mark.parametrize(
    "name, rope_scaling, named",
    [
        (
            "qwen3-vl-8b",
            {"mrope_interleaved": False, "mrope_section": [24, 20, 20]},
            "mrope_interleaved=False conflicts with model_type 'qwen3_vl'",
        ),
        (
            "qwen2-vl-7b",
            {"mrope_interleaved": True, "mrope_section": [24, 20, 20]},
            "mrope_interleaved=True conflicts with model_type 'qwen2_vl'",
        ),
        (
            "qwen2-vl-7b",
            {"type": "dynamic", "factor": 2.0, "mrope_section": [16, 24, 24]},
            "mrope does not support 'dynamic'",
        ),
        ("qwen2-vl-7b", {"type": "mrope", "mrope_section": [16, 24]}, "three ints"),
    ],
)
def test_mrope_config_errors(name, rope_scaling, named):
    raw = copy.deepcopy(MROPE_CONFIGS[name])
    raw.get("text_config", raw)["rope_scaling"] = rope_scaling
    with pytest.raises(ValueError, match=named):
        rope_from_hf_config(raw)
