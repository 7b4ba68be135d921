"""rope_from_hf_config against transformers: rotated q and k against its
apply_rotary_pos_emb, posenc's RoPE inside its tiny Llama, configs of real models, legacy
keys, and GPT-J's rotary_dim.

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

import posenc.hf
from posenc.hf import rope_from_hf_config
from posenc.rotary import RoPE

transformers = pytest.importorskip("transformers")
from tests.hf.tiny_llama import (  # noqa: E402
    HEAD_DIM,
    SCALINGS,
    SEQ,
    hf_rotation_tol,
    hf_table_n,
    llama_config,
    llama_tol,
    logits_with_posenc,
    scalings,
    tiny_model,
)
from transformers import AutoConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    apply_rotary_pos_emb_interleave,
)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

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
    # Kimi-K2-Instruct's config.json (its model_type "kimi_k2" runs DeepSeek-V3's code):
    # YaRN with beta_fast = beta_slow, a step between kept and scaled pairs (issue 52)
    "kimi-k2": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_attention_heads": 64,
        "num_hidden_layers": 61,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        "rope_theta": 50000.0,
        "vocab_size": 163840,
    },
}

EXPECTED = {  # (head_dim, rope_type, layout) read by hand from the configs above
    "llama-3.1-8b": (128, "llama3", "half"),
    "mistral-7b": (128, "default", "half"),
    "qwen2-7b": (128, "default", "half"),
    "phi-3-mini-128k": (96, "longrope", "half"),
    "deepseek-v3": (64, "yarn", "interleaved"),
    "kimi-k2": (64, "yarn", "interleaved"),
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


def test_kimi_k2s_equal_betas_turn_as_transformers_at_every_position():
    """beta_fast = beta_slow (Kimi-K2): transformers' DeepSeek-V3 rotary embedding and
    posenc's float64 tables agree to float32's rounding at every position of the context."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    from posenc.engines.compare import compare_tables, reference_tables
    from posenc.engines.hf_engine import pair_tables

    raw = REAL_CONFIGS["kimi-k2"]
    rope = rope_from_hf_config(copy.deepcopy(raw))
    assert (rope.scaling.beta_fast, rope.scaling.beta_slow) == (1.0, 1.0)
    positions = torch.arange(raw["max_position_embeddings"])
    emb = DeepseekV3RotaryEmbedding(AutoConfig.for_model(**copy.deepcopy(raw)))
    with torch.no_grad():
        cos, sin = emb(torch.zeros(1, 1, 1), positions[None])
    got = pair_tables(cos[0], sin[0], 32)
    found = compare_tables(got, reference_tables(rope, positions), positions, rope.inv_freq())
    assert found.first_position is None, found


@pytest.mark.parametrize(
    "lengths",
    [{}, {"original_max_position_embeddings": 8192, "max_position_embeddings": 32768}],
    ids=["no-lengths", "another-original"],
)
def test_hunyuans_alpha_reads_no_length(lengths):
    """``{"type": "dynamic", "alpha": a}`` is Hunyuan's static NTK-alpha: no
    max_position_embeddings needed, an original length of its own accepted (issue 52)."""
    from transformers.models.hunyuan_v1_dense import modeling_hunyuan_v1_dense as hunyuan

    scaling = {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32,
               "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}  # fmt: skip
    raw = {"model_type": "hunyuan_v1_dense", "hidden_size": 256, "num_attention_heads": 4,
           "head_dim": 64, "rope_theta": 10000.0, "rope_scaling": scaling}  # fmt: skip
    for key, value in lengths.items():  # the original in the RoPE dict, the context on top
        (raw["rope_scaling"] if key.startswith("original") else raw)[key] = value
    rope = rope_from_hf_config(copy.deepcopy(raw))
    assert rope.scaling.rope_type == "ntk_alpha"
    config = AutoConfig.for_model(**copy.deepcopy(raw))
    expected = hunyuan.HunYuanDenseV1RotaryEmbedding(config).inv_freq
    torch.testing.assert_close(rope.inv_freq(), expected.double(), rtol=2**-23, atol=0)


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


def test_legacy_gpt_neox_keys_read_as_transformers_reads_them(hub_config):
    # GPT-NeoX's config.json names the rotary fraction and base rotary_pct and
    # rotary_emb_base; transformers 5 reads them into rope_parameters, and so must the dict
    transformers = pytest.importorskip("transformers")
    legacy = hub_config("gpt-neox-20b", rotary_emb_base=20000, transformers_version=None)
    from_dict = rope_from_hf_config(legacy)
    from_object = rope_from_hf_config(transformers.GPTNeoXConfig.from_dict(legacy))
    assert from_dict.config == from_object.config
    assert (from_dict.config.base, from_dict.config.rotary_dim) == (20000.0, 24)


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
