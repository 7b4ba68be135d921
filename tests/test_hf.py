"""Hugging Face interop: posenc's RoPE inside transformers' Llama, configs of real models, and
context extension, each compared with what transformers itself computes.

Models are tiny and randomly initialised (no downloads). transformers computes angles in
float32, posenc in float64: positions stay below ~64 so that the float32 angles are exact
to ~1e-5 and the comparisons can be tight.
"""

import copy
import importlib
import math
import sys

import pytest
import torch
from torch import nn

import posenc.hf
from posenc.hf import EXTEND_METHODS, extend_context, rope_from_hf_config
from posenc.rotary import RoPE
from posenc.rotary.mrope import MRoPE

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    apply_rotary_pos_emb_interleave,
)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)
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

HEAD_DIM = 16  # of the tiny model: hidden 64, 4 heads
SEQ = 40  # longer than the tiny model's original length, 16


def long_factors(n):
    return [1.0 + 0.05 * i for i in range(n)], [1.0 + 1.5 * i for i in range(n)]


def scalings(original, head_dim):
    """rope_parameters of every scaling transformers runs, with original length ``original``."""
    short, long = long_factors(head_dim // 2)
    return {
        "default": {"rope_type": "default"},
        "linear": {"rope_type": "linear", "factor": 4.0},
        "dynamic": {"rope_type": "dynamic", "factor": 4.0},
        "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": original},
        "yarn-deepseek": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": original,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
        "yarn-attention-factor": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": original,
            "attention_factor": 1.1,
            "truncate": False,
        },
        "llama3": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": original,
        },
        "longrope": {
            "rope_type": "longrope",
            "short_factor": short,
            "long_factor": long,
            "original_max_position_embeddings": original,
        },
    }


def max_positions(rope_parameters, original):
    """``max_position_embeddings`` as a real config sets it: the original length for dynamic
    (transformers scales past it), the extended one for the others."""
    if rope_parameters["rope_type"] in ("default", "dynamic"):
        return original
    return int(original * rope_parameters.get("factor", 4.0))


def llama_config(
    rope_parameters, original=16, head_dim=HEAD_DIM, base=10000.0, max_position_embeddings=None
):
    """A tiny Llama config; ``rope_theta`` in ``rope_parameters`` wins over ``base``."""
    if max_position_embeddings is None:
        max_position_embeddings = max_positions(rope_parameters, original)
    return LlamaConfig(
        hidden_size=4 * head_dim,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_theta": base, **rope_parameters},
    )


SCALINGS = scalings(16, HEAD_DIM)


def hf_table_n(base):
    """transformers forms its angles in float32: frequencies 1 / base^(2i/d) off by about
    (ln(base)/2 + 2)·eps relatively (a rounded exponent of a large power), times the
    position (one rounding more); then cos/sin and the attention factor (two). posenc's
    tables are float64 angles rounded once. So a table entry is off by at most
    ``hf_table_n(base)·eps·factor·max(1, |angle|)``."""
    return math.log(base) / 2 + 5


def hf_rotation_tol(tol, base, largest_angle, factor, *xs):
    """Rotations of x by transformers' tables and by posenc's: the tables' error times
    |x1| + |x2| <= 2·max|x|, and the rotation's own three roundings."""
    size = 2 * factor * max(1.0, largest_angle) * max(x.abs().max().item() for x in xs)
    return tol(n=hf_table_n(base) + 3, scale=size)


def llama_tol(tol, config, seq, logits):
    """The logits of a tiny Llama with transformers' tables and with posenc's: an estimate,
    as for model_tol. A layer sums over its norms and projections (4·hidden + 3·intermediate
    terms), the scores (head_dim, with q and k off by the tables' error at angles up to
    seq) and the softmax and weighted values (seq each); the head sums 2·hidden more."""
    base = config.rope_parameters["rope_theta"]
    per_layer = 4 * config.hidden_size + 3 * config.intermediate_size + config.head_dim
    per_layer += 2 * seq + 4 * hf_table_n(base) * seq
    n = config.num_hidden_layers * per_layer + 2 * config.hidden_size
    return tol(n=n, scale=logits.abs().max().item())


# --- (a) rotated q/k against transformers' apply_rotary_pos_emb ---


@pytest.mark.parametrize("head_dim", [16, 64, 128])
@pytest.mark.parametrize("name", sorted(SCALINGS))
@pytest.mark.parametrize("batch_positions", [False, True], ids=["positions", "batch-positions"])
def test_rotation_matches_transformers(name, head_dim, batch_positions, tol):
    config = llama_config(scalings(24, head_dim)[name], original=24, head_dim=head_dim)
    seq, heads = 20, 4
    if batch_positions:  # each row at its own offset: the second one runs past the original 24
        positions = torch.stack([torch.arange(seq), torch.arange(seq) + 17])
    else:
        positions = torch.arange(seq)
    position_ids = positions if batch_positions else positions[None]  # [b, s]
    q = torch.randn(2, heads, seq, head_dim)
    k = torch.randn(2, heads // 2, seq, head_dim)

    cos, sin = LlamaRotaryEmbedding(config)(q, position_ids)  # [b, s, head_dim]
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    rope = rope_from_hf_config(config)
    q_ours, k_ours = rope(q, k, positions)

    base, largest = config.rope_parameters["rope_theta"], positions.max().item()  # θ_0 = 1
    rounding = hf_rotation_tol(tol, base, largest, cos.abs().max().item(), q, k)
    torch.testing.assert_close(q_ours, q_hf, **rounding)
    torch.testing.assert_close(k_ours, k_hf, **rounding)


def test_deepseek_layout_is_interleaved(tol):
    """DeepSeek-V3 keeps interleaved pairs in its weights: posenc's ``interleaved`` layout gives
    transformers' attention scores (its output is de-interleaved, a permutation shared by q
    and k that leaves every q·k unchanged)."""
    config = {
        "model_type": "deepseek_v3",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "qk_rope_head_dim": 32,
        "max_position_embeddings": 64,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 4,
            "original_max_position_embeddings": 16,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    }
    rope = rope_from_hf_config(config)
    assert rope.config.layout == "interleaved" and rope.head_dim == 32
    hf_config = AutoConfig.for_model(**config)
    q, k = torch.randn(1, 4, 12, 32), torch.randn(1, 4, 12, 32)
    positions = torch.arange(12)
    cos, sin = LlamaRotaryEmbedding(hf_config)(q, positions[None])
    q_hf, k_hf = apply_rotary_pos_emb_interleave(q, k, cos, sin)
    q_ours, k_ours = rope(q, k, positions)
    deinterleave = torch.cat((torch.arange(0, 32, 2), torch.arange(1, 32, 2)))
    factor = cos.abs().max().item()
    rounding = hf_rotation_tol(tol, 10000.0, 11, factor, q)
    torch.testing.assert_close(q_ours[..., deinterleave], q_hf, **rounding)
    # a score sums 32 products of rotated entries (up to 2·factor·max|x|), each entry off by
    # the rotation's bound (angles up to 11 rad), and rounds 32 times itself
    size = 32 * (2 * factor) ** 2 * (q.abs().max() * k.abs().max()).item()
    scores = tol(n=2 * 11 * (hf_table_n(10000.0) + 3) + 32, scale=size)
    torch.testing.assert_close(q_ours @ k_ours.mT, q_hf @ k_hf.mT, **scores)
    assert rope_from_hf_config({**config, "rope_interleave": False}).config.layout == "half"


# --- (b) a tiny Llama with posenc's RoPE in place of its own ---


class PosencRotary(nn.Module):
    """posenc standing in for ``model.model.rotary_emb`` of a transformers Llama.

    The Llama model calls ``rotary_emb(hidden_states, position_ids=position_ids)`` once per
    forward and hands the result to every layer's ``apply_rotary_pos_emb``. It expects cos
    and sin ``[batch, seq, head_dim]`` in the half layout's duplicated format: the n =
    head_dim / 2 per-pair values written twice, ``cat([c, c])``, in the activations' dtype.
    posenc's ``rotation`` gives ``[batch, seq, n]`` (the attention factor included).
    """

    def __init__(self, rope: RoPE) -> None:
        super().__init__()
        self.rope = rope

    def forward(self, x, position_ids):
        cos, sin = self.rope.rotation(position_ids)  # [b, s, n]
        return torch.cat((cos, cos), dim=-1).to(x.dtype), torch.cat((sin, sin), dim=-1).to(x.dtype)


def tiny_model(config):
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@torch.no_grad()
def logits_with_posenc(model, ids, rope):
    """The model's logits with its rotary embedding swapped for posenc's, then restored."""
    own = model.model.rotary_emb
    model.model.rotary_emb = PosencRotary(rope)
    try:
        return model(ids).logits
    finally:
        model.model.rotary_emb = own


@pytest.mark.parametrize("seq", [12, SEQ], ids=["within", "beyond"])
@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_llama_logits_with_posenc_rope(name, seq, tol):
    model = tiny_model(llama_config(SCALINGS[name]))
    ids = torch.randint(0, 100, (2, seq))
    with torch.no_grad():
        expected = model(ids).logits
    got = logits_with_posenc(model, ids, rope_from_hf_config(model.config))
    rounding = llama_tol(tol, model.config, seq, expected)
    torch.testing.assert_close(got, expected, **rounding)
    # the patch is what is tested: a wrong scaling changes the logits
    wrong = RoPE(head_dim=HEAD_DIM, base=10000.0, scaling={"rope_type": "linear", "factor": 3.0})
    assert not torch.allclose(logits_with_posenc(model, ids, wrong), expected, **rounding)


# --- (c) configs of real models ---

PHI3_SHORT = [round(1.0 + 0.002 * i * i / 48, 5) for i in range(48)]
PHI3_LONG = [round(1.0 + 46.0 * (i / 47) ** 2, 4) for i in range(48)]

REAL_CONFIGS = {
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "vocab_size": 128256,
    },
    "mistral-7b": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "vocab_size": 32000,
    },
    "qwen2-7b": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 131072,
        "max_window_layers": 28,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "use_sliding_window": False,
        "vocab_size": 152064,
    },
    "phi-3-mini-128k": {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"long_factor": PHI3_LONG, "short_factor": PHI3_SHORT, "type": "longrope"},
        "rope_theta": 10000.0,
        "sliding_window": 262144,
        "vocab_size": 32064,
    },
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_attention_heads": 128,
        "num_hidden_layers": 61,
        "num_key_value_heads": 128,
        "max_position_embeddings": 163840,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "vocab_size": 129280,
    },
}

EXPECTED = {  # (head_dim, rope_type, layout) read by hand from the configs above
    "llama-3.1-8b": (128, "llama3", "half"),
    "mistral-7b": (128, "default", "half"),
    "qwen2-7b": (128, "default", "half"),
    "phi-3-mini-128k": (96, "longrope", "half"),
    "deepseek-v3": (64, "yarn", "interleaved"),
}


def hf_frequencies(config, seq_len=None):
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len)


@pytest.mark.parametrize("name", sorted(REAL_CONFIGS))
def test_real_config_matches_transformers(name, tol):
    raw = REAL_CONFIGS[name]
    hf_config = AutoConfig.for_model(**copy.deepcopy(raw))
    rope = rope_from_hf_config(copy.deepcopy(raw))
    assert (rope.head_dim, rope.scaling.rope_type, rope.config.layout) == EXPECTED[name]
    from_object = rope_from_hf_config(hf_config).config  # the config object reads the same
    for key in ("head_dim", "rotary_dim", "base", "layout", "scaling"):
        assert getattr(from_object, key) == getattr(rope.config, key), key
    original = hf_config.rope_parameters.get("original_max_position_embeddings", 4096)
    for seq_len in (None, original, original + 1, 4 * original):
        expected, expected_factor = hf_frequencies(hf_config, seq_len)
        # transformers' float32 frequencies: a rounded exponent of a large power, a few ops
        rounding = tol(n=hf_table_n(rope.config.base), scale=0)
        torch.testing.assert_close(rope.inv_freq(seq_len).float(), expected, **rounding)
        assert rope.attention_factor(seq_len) == pytest.approx(expected_factor, rel=1e-12)


def test_phi3_reads_the_top_level_original_length():
    rope = rope_from_hf_config(REAL_CONFIGS["phi-3-mini-128k"])
    assert rope.scaling.original_max_position_embeddings == 4096
    assert rope.scaling.factor == 32.0  # 131072 / 4096, as transformers derives it
    assert rope.attention_factor() == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    # Phi-3's first releases called LongRoPE "su"; transformers' Phi-3 config renames it
    old = copy.deepcopy(REAL_CONFIGS["phi-3-mini-128k"])
    old["rope_scaling"]["type"] = "su"
    assert rope_from_hf_config(old).config == rope.config


def test_transformers_5_rope_parameters_and_partial_rotary(tol):
    config = {
        "hidden_size": 2560,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "partial_rotary_factor": 0.5,
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 25000.0},
    }
    rope = rope_from_hf_config({**config, "model_type": "llama"})
    assert (rope.head_dim, rope.config.rotary_dim, rope.config.base) == (80, 40, 25000.0)
    expected, _ = hf_frequencies(LlamaConfig(**config))
    rounding = tol(n=hf_table_n(25000.0), scale=0)  # as in test_real_config_matches_...
    torch.testing.assert_close(rope.inv_freq().float(), expected, **rounding)


def test_dynamic_takes_max_position_embeddings_as_original():
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    }
    assert rope_from_hf_config(config).scaling.original_max_position_embeddings == 2048
    config["rope_scaling"]["original_max_position_embeddings"] = 1024
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        rope_from_hf_config(config)


@pytest.mark.parametrize(
    "change, named",
    [
        (
            {"rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
            r"M-RoPE keys \['mrope_section', \"type='mrope'\"\] in a config of model_type None",
        ),
        (
            {"rope_scaling": {"type": "linear", "factor": 2.0, "mrope_section": [2]}},
            r"M-RoPE keys \['mrope_section'\]",
        ),
        (
            {"model_type": "my_vlm", "rope_scaling": {"mrope_section": [2, 3, 3]}},
            "model_type 'my_vlm'",
        ),
        (
            {
                "model_type": "llama",
                "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "beta_fastest": 8},
            },
            "beta_fastest",
        ),
        ({"rope_scaling": {"rope_type": "ntk-by-parts", "factor": 2.0}}, "ntk-by-parts"),
        ({"rope_parameters": {"full_attention": {"rope_type": "default"}}}, "full_attention"),
        ({"hidden_size": None, "num_attention_heads": None}, "head_dim"),
        (
            {"rope_scaling": {"type": "llama3", "factor": 8.0}, "max_position_embeddings": None},
            "max_position_embeddings",
        ),
    ],
)
def test_unknown_things_are_named(change, named):
    config = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 32, **change}
    with pytest.raises(ValueError, match=named):
        rope_from_hf_config(config)


def test_import_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails
    module = importlib.reload(posenc.hf)
    rope = module.rope_from_hf_config(REAL_CONFIGS["llama-3.1-8b"])
    assert rope.scaling.rope_type == "llama3"


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


def test_legacy_gpt_neox_keys_read_as_transformers_reads_them(hub_config):
    # GPT-NeoX's config.json names the rotary fraction and base rotary_pct and
    # rotary_emb_base; transformers 5 reads them into rope_parameters, and so must the dict
    transformers = pytest.importorskip("transformers")
    legacy = hub_config("gpt-neox-20b", rotary_emb_base=20000, transformers_version=None)
    from_dict = rope_from_hf_config(legacy)
    from_object = rope_from_hf_config(transformers.GPTNeoXConfig.from_dict(legacy))
    assert from_dict.config == from_object.config
    assert (from_dict.config.base, from_dict.config.rotary_dim) == (20000.0, 24)


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


@pytest.mark.parametrize("model_type", ["gptj", "codegen"])
@pytest.mark.parametrize("rotary_dim", [16, 64])
def test_gptj_and_codegen_rotate_their_rotary_dim_as_their_own_code(model_type, rotary_dim):
    """GPT-J and CodeGen rotate the leading ``rotary_dim`` channels of a head in pairs
    (2i, 2i + 1) with base 10000 (``create_sinusoidal_positions`` and
    ``apply_rotary_pos_emb(x, sin, cos)`` of their modeling modules); the rest passes."""
    import importlib

    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    config = transformers.AutoConfig.for_model(
        model_type, n_embd=256, n_head=4, rotary_dim=rotary_dim
    )
    rope = rope_from_hf_config(config)
    assert (rope.config.layout, rope.config.rotary_dim, rope.config.base) == (
        "interleaved",
        rotary_dim,
        10000.0,
    )
    q = torch.randn(1, 4, 9, 64, generator=torch.Generator().manual_seed(0))
    ours, _ = rope(q, q.clone())
    table = module.create_sinusoidal_positions(16, rotary_dim)[torch.arange(9)][None]
    sin, cos = torch.split(table, table.shape[-1] // 2, dim=-1)  # as their attention does
    x = q.transpose(1, 2)  # [batch, seq, heads, head_dim], their layout
    turned = module.apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos)
    theirs = torch.cat((turned, x[..., rotary_dim:]), dim=-1).transpose(1, 2)
    # float32 angles on both sides at positions < 9: rounding apart, while a wrong pair or
    # rotary_dim moves a channel by O(1)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_rotary_dim_is_read_only_where_the_code_reads_it():
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2}
    with pytest.raises(ValueError, match=r"rotary_dim=16.*'gptj'"):
        rope_from_hf_config({**config, "rotary_dim": 16})
    gptj = {"model_type": "gptj", "n_embd": 64, "n_head": 2, "rotary_dim": 16}
    with pytest.raises(ValueError, match="both rotary_dim and partial_rotary_factor"):
        rope_from_hf_config({**gptj, "partial_rotary_factor": 0.5})
