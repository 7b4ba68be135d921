"""The checkpoints the inspection tests read: transformers configs with the real
checkpoints' position-related values (no downloads), what each should read as, and a tiny
Llama. Phi-3-mini-128k's LongRoPE factors are plausible stand-ins of the right length (48
each), not Microsoft's. Imported as ``tests.hf.inspect.checkpoints``; needs transformers.
"""

import transformers

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
